"""Fixtures shared by more than one test folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Final weights of tests/fixtures/train_scripts/train_plain.py run once,
    uninterrupted, without any hook: what every resumed run must equal bitwise."""
    from tests.torch.jobs import plain_env, run

    out = tmp_path_factory.mktemp("ref") / "ref.pt"
    r = run("train_plain.py", [str(out)], plain_env())
    assert r.returncode == 0, r.stderr
    return out
