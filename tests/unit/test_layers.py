"""The import-layer contract in pyproject.toml (docs/architecture.md) that
scripts/test checks with import-linter: it holds on the tree, and an import
pointing back up a layer, or sideways between wrappers and profiler, fails it
naming the import. Run on a copy of the packages, so the tree is never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # the test extra installs it


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    for pkg in ("teiresias", "slurm_plugin", "wrappers", "profiler"):
        shutil.copytree(REPO / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so", "data", "src"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: the copy, not the editable install, is what import-linter reads.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_tree_keeps_its_layers(copy: Path) -> None:
    r = lint(copy)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        # The back-up imports the restructuring removed.
        ("profiler/store.py", "from wrappers.protocol import write_json_atomic", "profiler.store -> wrappers.protocol"),
        (
            "wrappers/profiling.py",
            "from slurm_plugin.config import load_config",
            "wrappers.profiling -> slurm_plugin.config",
        ),
        (
            "teiresias/cli/trace.py",
            "from slurm_plugin.controller.state import StateStore",
            "teiresias.cli.trace -> slurm_plugin.controller.state",
        ),
        (
            "wrappers/hooks/usage.py",
            "from profiler.aggregate import Profile",
            "wrappers.hooks.usage -> profiler.aggregate",
        ),
        (
            "teiresias/policy/las.py",
            "from teiresias.simulator import engine",
            "teiresias.policy.las -> teiresias.simulator",
        ),
        ("teiresias/jobfiles.py", "from teiresias.domain import Job", "teiresias.jobfiles -> teiresias.domain"),
    ],
)
def test_a_back_up_import_breaks_the_contract(copy: Path, module: str, line: str, named: str) -> None:
    path = copy / module
    before = path.read_text()
    try:
        # Inside a function, as most hidden edges were: the contract sees those too.
        path.write_text(before + f"\n\ndef _hidden() -> None:\n    {line}  # noqa\n")
        r = lint(copy)
    finally:
        path.write_text(before)
    assert r.returncode != 0 and "BROKEN" in r.stdout, r.stdout
    assert named in r.stdout, r.stdout
