"""The README's commands as a newcomer reads them: its fenced ``bash`` blocks
and the command column of its tables (tests/unit/test_readme.py,
tests/slurm/test_readme_commands.py)."""

from __future__ import annotations

import re

from tests.doc_blocks import README, ROOT, fenced_blocks

__all__ = ["README", "ROOT", "SETUP", "bash_blocks", "subcommand", "table_commands"]
# The set-up block, kept exactly: its commands install everything and run the
# demo and the whole suite, which have their own tests (test_demo.py, CI).
SETUP = ("scripts/demo", "scripts/test")


def bash_blocks() -> list[list[str]]:
    """Each fenced bash block as its commands (tests/doc_blocks.py reads them):
    comments and blank lines dropped, backslash-continued lines joined."""
    return [b.commands() for b in fenced_blocks(README) if b.lang == "bash"]


def table_commands(text: str | None = None) -> list[str]:
    """The first `code` span of every table row whose header names a command."""
    text = README.read_text(encoding="utf-8") if text is None else text
    out = []
    col = None
    for line in text.splitlines():
        if not line.startswith("|"):
            col = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if col is None:
            col = cells.index("command") if "command" in cells else -1
            continue
        if col < 0 or set(cells[0]) <= {"-", " "}:
            continue
        m = re.match(r"`([^`]+)`", cells[col])
        if m:
            out.append(m.group(1))
    return out


def subcommand(cmd: str) -> str:
    """``teiresias cluster up -n 4`` -> ``teiresias cluster up``: the program and
    its subcommand words, up to the first option or argument."""
    words = []
    for w in cmd.split():
        if w.startswith("-") or w.startswith("[") or "." in w or "/" in w or w.isupper():
            break
        words.append(w)
        if words[0] != "teiresias":
            break
    return " ".join(words)
