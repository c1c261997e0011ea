"""The docs run as written (issue 23 item 11; the rule: docs/architecture.md, "Checks").

Every fenced block of README.md and docs/*.md names its language; every shell
block runs in a test or is marked ``<!-- excerpt: WHY -->`` on the line
before its fence. The docs' runnable blocks run here, each document's in
order in one bash (``set -e``), on a copy of the clone (its tracked files and
a link to this venv as ``.venv``, on PATH as after the README's first steps);
the README's run in tests/slurm/test_readme_commands.py, which has a cluster.
No link or path in them leads out of the repository (``../shared/`` is the
workplace's, not the clone's) or to a file the clone does not have.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, SHELL, copy_of_the_clone, documents, fenced_blocks, runnable

DOCS_TO_RUN = [p for p in documents() if p.name != "README.md" and runnable(p)]
# A Markdown link target, or a path in text or code that climbs out of its folder.
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_CLIMB = re.compile(r"(?<![\w./])(?P<path>(?:\.\./)+[\w*.-][\w*./-]*)")
# Commands this test must never run, as root, on the machine it runs on: a block using
# them is a site's or a cluster's, and must be marked as an excerpt (or run in tests/slurm).
_MACHINE = re.compile(
    r"\b(?:systemctl|sudo|apt-get|apt|useradd|mount|install|cluster up|sbatch|tsbatch|scontrol)\b"
    r"|(?<![\w.$-])/(?:etc|opt|usr|var|srv|root|boot|shared)/"
)


def test_every_fence_names_its_language() -> None:
    bare = [b.where for d in documents() for b in fenced_blocks(d) if not b.lang]
    assert not bare, (
        f"fenced blocks without a language: {bare}; write ```bash for commands (they run in a test "
        "unless marked <!-- excerpt: WHY -->), ```text for output, diagrams and config lines"
    )


def test_the_rule_reads_fences_and_markers(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "# t\n\n```bash\ntrue \\\n  --x\n# c\nls\n```\n\n<!-- excerpt: a site -->\n\n"
        "```sh\nsystemctl start x\n```\n\n1. item\n\n   ```\n   plain\n   ```\n~~~python\nx = 1\n~~~\n"
    )
    blocks = fenced_blocks(doc)
    assert [(b.line, b.lang, b.excerpt) for b in blocks] == [
        (3, "bash", None),
        (12, "sh", "a site"),
        (18, "", None),
        (21, "python", None),
    ]
    assert blocks[0].commands() == ["true   --x", "ls"] and blocks[2].body == "plain\n"
    assert [b.line for b in runnable(doc)] == [3]
    for cmd in ("systemctl start x", "cp a /etc/slurm/x", "teiresias cluster up -n 2", "sudo true"):
        assert _MACHINE.search(cmd), cmd
    assert not _MACHINE.search("teiresias simulate -t t.csv -c etc/cluster.yaml --json $OUT/x.json")


@pytest.mark.parametrize("doc", DOCS_TO_RUN, ids=[p.name for p in DOCS_TO_RUN])
def test_the_docs_shell_blocks_run_as_written(doc: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    clone = copy_of_the_clone(tmp_path_factory.mktemp("clone"))
    home = tmp_path_factory.mktemp("home")
    risky = [f"{b.where}: {c}" for b in runnable(doc) for c in b.commands() if _MACHINE.search(c)]
    assert not risky, (
        f"not run: these commands would change this machine or need a cluster: {risky}; mark the block "
        "<!-- excerpt: WHY --> (or run it against the test cluster in tests/slurm)"
    )
    lines = ["set -eo pipefail", "trap 'echo \"docs command failed (exit $?): $BASH_COMMAND\" >&2' ERR"]
    for block in runnable(doc):
        lines.append(f"echo '# {block.where}'")
        lines += block.commands()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
    env.update(HOME=str(home), PATH=f"{clone / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    r = subprocess.run(
        ["bash", "-c", "\n".join(lines) + "\n"], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, f"{doc.name}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def test_shell_blocks_are_run_somewhere_or_marked() -> None:
    """The README's unmarked shell blocks are bash (the README test runs those); a doc's
    shell block in another language than bash is marked (bash is what runs them)."""
    odd = [
        b.where
        for d in documents()
        for b in fenced_blocks(d)
        if b.lang in SHELL and b.lang != "bash" and b.excerpt is None
    ]
    assert not odd, f"shell blocks to write as ```bash (or mark <!-- excerpt: WHY -->): {odd}"


def test_a_tested_marker_names_a_test_that_reads_its_document() -> None:
    """``<!-- tested: TEST -->`` takes a block out of this file's runs only when TEST
    exists and reads the document the block is in (so the marker cannot just silence it)."""
    bad = []
    for d in documents():
        for b in fenced_blocks(d):
            if b.tested is None:
                continue
            test = ROOT / b.tested
            name = str(d.relative_to(ROOT))
            if not test.is_file() or name not in test.read_text(encoding="utf-8"):
                bad.append(f"{b.where}: {b.tested} does not exist or never names {name}")
    assert not bad, bad


def test_no_link_or_path_leads_out_of_the_repository() -> None:
    bad = []
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        for m in _LINK.finditer(text):
            target = m["target"].split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # an anchor, http:, mailto:
                continue
            where = (doc.parent / target).resolve()
            if not where.is_relative_to(ROOT) or not where.exists():
                bad.append(f"{doc.relative_to(ROOT)}: link {m['target']}")
        for m in _CLIMB.finditer(text):
            where = (doc.parent / m["path"]).resolve()
            inside = where.is_relative_to(ROOT) and where != ROOT
            if not inside or not any(ROOT.glob(str(where.relative_to(ROOT)))):
                bad.append(f"{doc.relative_to(ROOT)}: {m['path']}")
    assert not bad, f"outside the repository or missing: {bad}; cite papers by name, keep facts in the docs"
