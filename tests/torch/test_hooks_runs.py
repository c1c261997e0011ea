"""The hooks record each run's iteration time in runs.jsonl (PACKLIMIT from history)."""

from __future__ import annotations

import pytest

from tests.torch.jobs import job_env, run
from wrappers.hooks.steptime import WARMUP_STEPS
from wrappers.protocol import read_runs

pytestmark = pytest.mark.torch


def test_a_run_writes_its_median_step_time_at_exit(tmp_path):
    base = tmp_path / "jobs"
    # 1 epoch x 12 steps, each with 50 ms of pretend compute after the step.
    env = job_env(base, 31, 2, TRAIN_EPOCHS="1", TRAIN_STEP_SLEEP="0.05", SLURM_JOB_NUM_NODES="2")
    r = run("train_plain.py", [str(tmp_path / "out.pt")], env)
    assert r.returncode == 0, r.stderr
    runs = read_runs(base / "31")
    assert list(runs) == [2]  # keyed by the run's SLURM_RESTART_COUNT
    rr = runs[2]
    assert (rr.job_id, rr.nodes) == (31, 2)
    assert rr.steps == 12 - 1 - WARMUP_STEPS  # intervals between steps, warm-up left out
    assert 0.05 <= rr.median_step_s < 0.5


def test_a_job_without_a_job_id_writes_nothing(tmp_path):
    env = job_env(tmp_path / "jobs", 32, TRAIN_EPOCHS="1")
    env.pop("SLURM_JOB_ID")
    r = run("train_plain.py", [str(tmp_path / "out.pt")], env)
    assert r.returncode == 0, r.stderr
    assert not list(tmp_path.glob("jobs/*/runs.jsonl"))
