"""Time-slicing in the job (wrappers/hooks/suspend.py): SIGTSTP parks the
process at the next step boundary, SIGCONT resumes it, training is unchanged.

Real PyTorch, real hooks, real signals (what ``scontrol suspend/resume`` send:
SIGTSTP, SIGSTOP ~2 s later, SIGCONT). CPU only: the offload to the host
moves nothing here, the control flow is the one a GPU job takes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.torch.jobs import job_env, last_step, poll, same_weights, signal_tree, start
from wrappers.protocol import job_dir, read_slices

pytestmark = pytest.mark.torch


def _state(pid: int) -> str:
    # /proc/PID/stat: "pid (comm) S ..."; comm may hold spaces, the state follows the last ')'.
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def _stopped(proc: subprocess.Popen) -> bool:
    return _state(proc.pid) == "T"


@contextmanager
def _training(tmp_path: Path, job: int, step_sleep: str) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """train_plain.py as job ``job`` under the hooks, pausing ``step_sleep`` s after each
    step: (process, its log, its weights file); killed if still running at the end."""
    log, out = tmp_path / "out.log", tmp_path / "w.pt"
    proc = start("train_plain.py", [str(out)], job_env(tmp_path / "jobs", job, TRAIN_STEP_SLEEP=step_sleep), log)
    try:
        yield proc, log, out
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigtstp_parks_at_a_step_boundary_and_sigcont_resumes_bitwise(tmp_path, reference) -> None:
    with _training(tmp_path, 81, "0.05") as (proc, log, out):
        poll("step 3", lambda: last_step(log) >= 3)
        # SIGTSTP alone: the process must stop itself (Slurm's SIGSTOP comes 2 s later).
        proc.send_signal(signal.SIGTSTP)
        poll("the process stopped itself", lambda: _stopped(proc), timeout=30)
        at = last_step(log)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=120) == 0
    assert same_weights(out, reference)
    [rec] = read_slices(job_dir(tmp_path / "jobs", 81))
    # Parked inside optimizer.step()'s post-hook: the script prints that step after the resume.
    assert rec.step == at + 1
    assert rec.parked > 0 and rec.signalled <= rec.parked <= rec.resumed
    assert rec.offloaded_bytes == 0  # CPU tensors stay where they are


def test_stopped_mid_step_by_slurm_does_not_park_again_after_resume(tmp_path, reference) -> None:
    """Slurm's SIGSTOP can come before the step ends; after SIGCONT the process
    must go on, not stop itself with nobody left to wake it."""
    # A long pause after each step: the signals land between steps, before any boundary is reached.
    with _training(tmp_path, 82, "0.3") as (proc, log, out):
        poll("step 2", lambda: last_step(log) >= 2)
        proc.send_signal(signal.SIGTSTP)
        proc.send_signal(signal.SIGSTOP)
        poll("stopped by SIGSTOP", lambda: _stopped(proc), timeout=30)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=120) == 0
    assert same_weights(out, reference)
    assert read_slices(job_dir(tmp_path / "jobs", 82)) == []


def test_process_without_optimizer_stops_at_once(tmp_path) -> None:
    """torchrun's agent (torch imported, nothing trained) has no step to wait for."""
    script = tmp_path / "idle.py"
    script.write_text("import sys, time, torch\nprint('ready', flush=True)\ntime.sleep(120)\n")
    log = tmp_path / "idle.log"
    env = job_env(tmp_path / "jobs", 83)
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=f, stderr=subprocess.STDOUT)
    try:
        poll("ready", lambda: "ready" in log.read_text())
        signal_tree(proc.pid, signal.SIGTSTP)
        poll("stopped", lambda: _stopped(proc), timeout=30)
    finally:
        proc.kill()
        proc.wait()


def test_torchrun_ranks_all_park_and_resume_to_the_same_weights(tmp_path) -> None:
    """SIGTSTP to the whole job (what Slurm sends): torchrun's agent stops at once, both
    ranks park after the same optimizer step (agreed in the stop all-reduce), and after
    SIGCONT the job ends with the weights of an uninterrupted run."""
    import psutil
    import torch

    from tests.torch.jobs import PYTHON, SCRIPTS

    def torchrun(job: int, out: Path, log: Path) -> subprocess.Popen:
        env = job_env(tmp_path / "jobs", job, TRAIN_STEP_SLEEP="0.05")
        with open(log, "w") as f:
            return subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node=2",
                    str(SCRIPTS / "train_elastic.py"),
                    str(out),
                ],
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
            )

    log = tmp_path / "sliced.log"
    proc = torchrun(85, tmp_path / "sliced.pt", log)
    plain = torchrun(84, tmp_path / "plain.pt", tmp_path / "plain.log")  # beside it
    try:
        poll("step 4", lambda: last_step(log) >= 4, timeout=120)
        tree = [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(recursive=True))]
        signal_tree(proc.pid, signal.SIGTSTP)
        poll("every process of the job stopped", lambda: all(_state(p) == "T" for p in tree), timeout=30)
        signal_tree(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
        assert plain.wait(timeout=300) == 0, (tmp_path / "plain.log").read_text()[-3000:]
    finally:
        for p in (proc, plain):
            if p.poll() is None:
                p.kill()
    [rec] = read_slices(job_dir(tmp_path / "jobs", 85))
    assert rec.parked > 0  # rank 0 stopped itself at a step boundary
    a, b = torch.load(tmp_path / "plain.pt", weights_only=True), torch.load(tmp_path / "sliced.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
