"""The generated batch script's answer to USR1, run under bash outside Slurm
(fake SLURM_* variables, real signals): it records the request for the hooks,
forwards the signal, and acks "nothing new to save" only when no process of
this run has started training. The live test is in tests/slurm/test_wrapper_resume.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.helpers import poll
from wrappers import protocol
from wrappers.batchscript import JobSetup, render

# The user's script: a Python that notes the signals it is forwarded (it may
# handle them although the batch shell started it with USR1/USR2 ignored).
CHILD = f"""#!{sys.executable}
import pathlib, signal, sys, time
seen = pathlib.Path(sys.argv[1])
def note(signum, frame):
    with seen.open("a") as f:
        f.write(signal.Signals(signum).name + "\\n")
signal.signal(signal.SIGUSR1, note)
signal.signal(signal.SIGUSR2, note)
seen.with_suffix(".ready").touch()
time.sleep(120)
"""


@pytest.fixture
def batch(tmp_path):
    base = tmp_path / "base"
    script = tmp_path / "batch.sh"
    script.write_text(
        render(CHILD, JobSetup(hook_site=str(tmp_path / "site"), base=str(base), every=0, profile=False, grace=90))
    )
    script.chmod(0o755)
    seen = tmp_path / "seen.txt"
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
        env.update(SLURM_JOB_ID="7", SLURM_RESTART_COUNT="1")
        p = subprocess.Popen(["bash", str(script), str(seen)], env=env)
        procs.append(p)
        poll("the child to be ready", lambda: seen.with_suffix(".ready").exists(), timeout=30, every=0.05)
        return p

    yield start, base / "7", seen
    for p in procs:
        tree = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
        for q in tree:
            q.kill()
        p.wait(timeout=10)


def test_usr1_before_any_process_started_is_acked_by_the_shell(batch):
    start, jobdir, seen = batch
    (jobdir / "checkpoints").mkdir(parents=True)
    for name in ("ckpt-000001-step5.pt", "ckpt-000002-step12.pt"):
        (jobdir / "checkpoints" / name).touch()
    p = start()
    p.send_signal(signal.SIGUSR1)
    ack = poll("the shell's Ack", lambda: protocol.read_ack(jobdir), timeout=10, every=0.05)
    assert ack == protocol.Ack(
        job_id=7, restart_count=1, step=12, path="", bytes=0, seconds=0.0, time=ack.time, saved=False
    )
    assert (jobdir / protocol.PREEMPT_REQUEST.format(restart=1)).exists()
    poll("the forwarded USR1", lambda: seen.exists() and "SIGUSR1" in seen.read_text(), timeout=10)
    assert p.poll() is None, "the batch shell must survive USR1"


def test_usr1_after_a_process_started_is_left_to_the_hooks(batch):
    start, jobdir, seen = batch
    jobdir.mkdir(parents=True)
    protocol.mark_run_started(jobdir, 1, 4242)
    p = start()
    p.send_signal(signal.SIGUSR1)
    poll("the forwarded USR1", lambda: seen.exists() and seen.read_text().split() == ["SIGUSR1"], timeout=10)
    # bash runs one trap at a time: once this USR2 is forwarded, the USR1 handler
    # (forward, look for markers, maybe ack) has returned. (Sent together, bash
    # 5.2 may run only the second trap, hence one after the other.)
    p.send_signal(signal.SIGUSR2)
    poll("the forwarded USR2", lambda: seen.read_text().split() == ["SIGUSR1", "SIGUSR2"], timeout=10)
    assert (jobdir / protocol.PREEMPT_REQUEST.format(restart=1)).exists()
    assert not protocol.ack_path(jobdir).exists()
    assert sorted(os.listdir(jobdir)) == ["preempt-requested.1", "started.1.4242"]
