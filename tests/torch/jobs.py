"""Run a training script the way a tsbatch job runs it, outside Slurm:
the hook folder on PYTHONPATH, TEIRESIAS_* and fake SLURM_* variables, real
signals with os.kill. Shared by tests/torch and tests/slurm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO
from tests.conftest import poll as _poll

HOOK_SITE = REPO / "wrappers" / "hooks" / "site"
SCRIPTS = REPO / "tests" / "fixtures" / "train_scripts"
PYTHON = sys.executable


def job_env(base: Path, job_id: int, restart: int = 0, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
    env.update(
        PYTHONPATH=str(HOOK_SITE),
        TEIRESIAS_CHECKPOINT="1",
        TEIRESIAS_JOB_BASE=str(base),
        SLURM_JOB_ID=str(job_id),
        OMP_NUM_THREADS="1",
    )
    if restart:
        env["SLURM_RESTART_COUNT"] = str(restart)
    env.update(extra)
    return env


def plain_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
    env.pop("PYTHONPATH", None)
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def run(script: str, args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(SCRIPTS / script), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def start(
    script: str, args: list[str], env: dict[str, str], log: Path, file_size_limit: int | None = None
) -> subprocess.Popen:
    """The script in the background, output to ``log``; ``file_size_limit``: bytes, as ``ulimit -f``."""
    import resource

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    f = open(log, "w")
    return subprocess.Popen(
        [PYTHON, str(SCRIPTS / script), *args], env=env, stdout=f, stderr=subprocess.STDOUT, preexec_fn=limit
    )


def poll(what: str, check: Callable[[], object], timeout: float = 60, every: float = 0.05) -> object:
    """tests.conftest.poll, polling fast: preemption tests signal right after a given step."""
    return _poll(what, check, timeout, every)


def steps_in(log: Path) -> list[int]:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [int(line.split()[1]) for line in lines if line.startswith("step ")]


def last_step(log: Path) -> int:
    s = steps_in(log)
    return s[-1] if s else 0


def read_ack(jobdir: Path) -> dict | None:
    try:
        return json.loads((jobdir / "ack.json").read_text())
    except (OSError, ValueError):
        return None


def same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to a process and all its descendants (what scancel --full does)."""
    import psutil

    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for p in procs:
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass


def preempt(proc: subprocess.Popen, log: Path, jobdir: Path, at_step: int, timeout: float = 60) -> dict:
    """Send the preemption signal after ``at_step``, wait for the Ack, check the job
    waits (does not exit), then end it as a requeue would (SIGTERM)."""
    poll(f"step {at_step}", lambda: last_step(log) >= at_step, timeout)
    (jobdir / "ack.json").unlink(missing_ok=True)
    signal_tree(proc.pid, signal.SIGUSR1)
    ack = poll("the Ack", lambda: read_ack(jobdir), timeout)
    assert proc.poll() is None, "a preempted job must wait to be requeued, not exit"
    signal_tree(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    return ack


def batch_script(tmp: Path, base: Path, command: str) -> Path:
    """The batch script tsbatch would submit for a job running ``command``
    (wrappers/batchscript.py, hooks on), written to ``tmp/batch.sh``: run it with
    ``start_batch`` as slurmstepd runs it, outside Slurm."""
    from wrappers.batchscript import JobSetup, render

    path = tmp / "batch.sh"
    path.write_text(render(f"#!/bin/bash\n{command}\n", JobSetup(str(HOOK_SITE), str(base), 0, False, 90)))
    return path


def start_batch(batch: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``bash batch.sh`` in a session of its own (as a job step), output to ``log``."""
    f = open(log, "w")
    return subprocess.Popen(["bash", str(batch)], env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
