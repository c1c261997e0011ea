"""Signals at every moment of a job's life, sent to real processes of the real
batch script (wrappers/batchscript.py run by bash, as slurmstepd runs it, with
real PyTorch training under it): the wrapper answers each one, and never dies
of one (issue 20 B2)."""

from __future__ import annotations

import signal

import pytest

from teiresias.jobfiles import new_key
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


def _agent_of(batch_pid: int) -> int | None:
    """torchrun's agent under the batch shell (a slow scan of every process: once)."""
    import psutil

    try:
        tree = psutil.Process(batch_pid).children(recursive=True)
    except psutil.Error:
        return None
    for p in tree:
        try:
            if "torch.distributed.run" in " ".join(p.cmdline()):
                return p.pid
        except psutil.Error:
            pass
    return None


def _children(pid: int) -> list[int]:
    """The children of ``pid`` from /proc/PID/task/*/children: a read of a few files, so
    a new worker is seen within a millisecond of its start (a scan of every process took 60 ms)."""
    import glob

    kids: list[int] = []
    for f in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            kids += [int(k) for k in open(f).read().split()]
        except OSError:
            pass
    return kids


def test_usr1_as_torchrun_starts_its_workers_is_answered_not_fatal(tmp_path):
    """USR1 (scancel --full) at the moment torchrun's agent starts its workers, under
    the real batch script. The agent has the hooks' handler, and exec puts a handled
    signal back to its default action: a worker that got the signal before its
    sitecustomize ran (Python's first milliseconds) died of it, "exitcode: -10
    (SIGUSR1)", and the job FAILED. The window is a few milliseconds wide, so each
    worker is sent USR1 every 2 ms from the moment it exists, for a second, besides
    the one signal to the whole job. The job must answer the preemption instead: a
    checkpoint after the first step (the batch shell recorded the request) and an
    Ack, then wait to be requeued."""
    import os
    import time

    base, out, log = tmp_path / "jobs", tmp_path / "out.pt", tmp_path / "job.log"
    command = f"{PYTHON} -m torch.distributed.run --standalone --nproc-per-node=2 {SCRIPTS / 'train_elastic.py'} {out}"
    batch = batch_script(tmp_path, base, command, key=new_key())
    proc = start_batch(batch, job_env(base, 62, TRAIN_STEP_SLEEP="0.05"), log)
    try:
        agent = poll("torchrun's agent", lambda: _agent_of(proc.pid), timeout=120)
        assert isinstance(agent, int)
        poll("torchrun's workers", lambda: _children(agent), timeout=120, every=0.0005)
        signal_tree(proc.pid, signal.SIGUSR1)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for pid in _children(agent):
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            time.sleep(0.002)
        ack = poll(
            "the hooks' Ack",
            lambda: (a if (a := read_ack(base / "62")) and a["saved"] else None) or proc.poll() is not None,
            timeout=120,
        )
        text = log.read_text()
        assert proc.poll() is None, f"the job ended ({proc.returncode}) instead of answering:\n{text[-3000:]}"
        assert "SIGUSR1" not in text and "exitcode" not in text, text[-3000:]
        assert isinstance(ack, dict) and ack["step"] >= 1, ack
    finally:
        if proc.poll() is None:
            signal_tree(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except Exception:
                signal_tree(proc.pid, signal.SIGKILL)
                raise
