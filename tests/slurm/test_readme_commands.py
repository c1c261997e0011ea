"""The README's commands, run as written and in order, on a copy of the clone
(its tracked files, plus a link to this venv as the set-up's ``.venv``), the
way a newcomer pastes them after the set-up: each must exit 0.

The local-cluster block starts its own cluster, in a folder and on ports of
its own (``TEIRESIAS_CLUSTER_DIR``/``TEIRESIAS_CLUSTER_PORT_BASE``, which the
README names): the test cluster dir with ``-readme`` appended, port base
``TEIRESIAS_TEST_CLUSTER_PORT_BASE`` + 10 (the session cluster uses +0..+4).
Its last command, ``teiresias cluster down``, must not stop the session's
cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import README, copy_of_the_clone, runnable
from tests.slurm.conftest import test_cluster_config

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _script(commands: list[str]) -> str:
    # set -e stops at the first failing command; the trap names it.
    lines = ["set -eo pipefail", "trap 'echo \"README command failed (exit $?): $BASH_COMMAND\" >&2' ERR"]
    for cmd in commands:
        lines += [f"echo '+ '{_quote(cmd)}", cmd]
    return "\n".join(lines) + "\n"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def test_readme_commands_run_as_written(tmp_path: Path, slurm_cluster) -> None:
    # The README's shell blocks not marked as excerpts (the set-up, scripts/demo and
    # scripts/test, is: CI runs them); docs/architecture.md "Checks".
    blocks = [b.commands() for b in runnable(README)]
    assert len(blocks) >= 2
    clone = copy_of_the_clone(tmp_path / "clone")
    session = test_cluster_config()
    cluster_dir = Path(f"{session.dir}-readme")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
    env.update(
        HOME=str(tmp_path / "home"),  # tsbatch's default job folder is ~/.teiresias/jobs
        TEIRESIAS_CLUSTER_DIR=str(cluster_dir),
        TEIRESIAS_CLUSTER_PORT_BASE=str(session.port_base + 10),
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
    )
    (tmp_path / "home").mkdir()
    script = _script([cmd for block in blocks for cmd in block])
    try:
        res = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=540)
    finally:
        subprocess.run(
            [sys.executable, "-m", "teiresias", "cluster", "down", "--dir", str(cluster_dir), "-q"],
            env=env,
            capture_output=True,
            timeout=120,
        )
    assert res.returncode == 0, f"{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    # The commands did what the README says they do.
    page = (clone / "report.html").read_text(encoding="utf-8")
    assert '<section id="jct">' in page and "data:image/svg+xml" in page
    assert (clone / "philly.csv").exists() and (clone / "state" / "state.db").exists()
    assert "gittins" in res.stdout and "fifo" in res.stdout
    queue = res.stdout.split("+ teiresias queue -c try.yaml", 1)[1]
    assert "try" in queue and "node" in queue  # the job the controller placed
    # The session's cluster is still up: the README's `cluster down` stopped only its own.
    assert slurm_cluster.cluster.status().ready
