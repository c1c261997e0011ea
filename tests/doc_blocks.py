"""The fenced blocks of README.md and docs/*.md, as the docs rule reads them
(docs/architecture.md, "Checks"; tests/unit/test_doc_blocks.py,
tests/slurm/test_readme_commands.py).

Every fence names its language. A shell block (``bash``, ``sh``, ``shell``,
``console``) runs in a test as written, unless the last non-blank line
before its opening fence is the excerpt marker ``<!-- excerpt: WHY -->``
(``WHY``: what it needs that a test cannot have, e.g. a site's systemd), or
the tested marker ``<!-- tested: TEST -->``: the test file TEST runs it, on a
machine it prepares (tests/site runs docs/admin.md's install blocks as root).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_EXCERPT = re.compile(r"^\s*<!--\s*excerpt:\s*(?P<why>\S.*?)\s*-->\s*$")
_TESTED = re.compile(r"^\s*<!--\s*tested:\s*(?P<test>\S+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (1-based line of the opening fence), its
    language (the info string's first word, '' when none), its text, the
    excerpt marker's reason and the tested marker's test file (None: not marked)."""

    path: Path
    line: int
    lang: str
    body: str
    excerpt: str | None
    tested: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """The block's commands: comments and blank lines dropped, backslash-continued
        lines joined (tests/readme_blocks.py reads the README so too)."""
        cmds: list[str] = []
        pending = ""
        for line in self.body.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1]
                continue
            cmds.append((pending + line).strip())
            pending = ""
        return cmds


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order (indented fences, as in list items, too)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        lang = m["info"].strip().split(" ")[0].lower() if m["info"].strip() else ""
        before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = _EXCERPT.match(before)
        tested = _TESTED.match(before)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence[0] * len(fence)) and not lines[j].strip().strip(fence[0])
        ):
            body.append(lines[j][indent:] if lines[j].startswith(" " * indent) else lines[j].lstrip())
            j += 1
        blocks.append(
            Block(
                path,
                i + 1,
                lang,
                "\n".join(body) + "\n",
                marker["why"] if marker else None,
                tested["test"] if tested else None,
            )
        )
        i = j + 1
    return blocks


def documents() -> list[Path]:
    """README.md and every docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable(path: Path) -> list[Block]:
    """The shell blocks of ``path`` a test must run: not marked as excerpts, nor run by
    the test a tested marker names."""
    return [b for b in fenced_blocks(path) if b.lang in SHELL and b.excerpt is None and b.tested is None]


def copy_of_the_clone(dest: Path) -> Path:
    """The clone's tracked files under ``dest`` (a file deleted in the working tree is
    not part of the clone), plus a link to this venv as the set-up's ``.venv``."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest
