"""Signals at every moment of a job's life, sent to real processes of the real
batch script (wrappers/batchscript.py run by bash, as slurmstepd runs it, with
real PyTorch training under it): the wrapper answers each one, and never dies
of one (issue 20 B2)."""

from __future__ import annotations

import signal

import pytest

from tests.torch.jobs import (
    PYTHON,
    SCRIPTS,
    batch_script,
    job_env,
    poll,
    read_ack,
    same_weights,
    signal_tree,
    start_batch,
)

pytestmark = pytest.mark.torch


def test_usr1_after_the_last_step_leaves_the_job_to_exit_0(tmp_path, reference):
    """USR1 (scancel --full: every process of the job) while the finished script's
    Python tears down its modules: Python's finalization had put USR1's default
    action (to die) back, the job ended FAILED 138 and was not requeued."""
    base, out, log = tmp_path / "jobs", tmp_path / "out.pt", tmp_path / "job.log"
    batch = batch_script(tmp_path, base, f"{PYTHON} {SCRIPTS / 'train_plain.py'} {out}")
    proc = start_batch(batch, job_env(base, 61, TRAIN_EXIT_SLEEP="1.5"), log)
    try:
        poll("the script's teardown", lambda: "closing" in log.read_text(), timeout=120)
        signal_tree(proc.pid, signal.SIGUSR1)
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            signal_tree(proc.pid, signal.SIGKILL)
    assert same_weights(reference, out)
    assert read_ack(base / "61") is None  # nothing to ack: the job ended
