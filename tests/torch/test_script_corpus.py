"""The corpus of training scripts as people write them (tests/fixtures/train_scripts/
corpus/, issue 23 A), each run uninterrupted without the hooks and, with them,
preempted three times: in the middle of an epoch, right after a restart (as the
resumed run reaches its checkpoint) and at an epoch's end; then run to its end.
Real processes, real signals (USR1 to the process tree as ``scancel --full``,
then SIGTERM as a requeue). Each script either ends bitwise equal to its
uninterrupted run (weights, optimizer state, every saved tensor), or is refused
with its one line and exit 2, its checkpoints untouched and no output written.
docs/checkpointing.md lists which and why."""

from __future__ import annotations

import math
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.torch.jobs import PYTHON, SCRIPTS, job_env, plain_env, poll, read_ack, signal_tree

pytestmark = pytest.mark.torch

CORPUS = SCRIPTS / "corpus"
PAUSE = "0.3"  # seconds per step in preempted runs: a signal sent after step k lands before step k+1


@dataclass(frozen=True)
class Case:
    script: str
    steps_per_epoch: int  # optimizer steps
    refused: str = ""  # the refusal's words; "" = bitwise
    refused_at: int = 1  # the run that is refused (0: the first, before any preemption)
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("lightning_style.py", 6),
    Case("hf_style.py", 6),
    Case("accumulate_no_sync.py", 6),
    Case("ema.py", 6),
    Case("augment_workers.py", 6),
    Case(
        "augment_workers.py",
        6,
        refused="persistent DataLoader workers draw random numbers",
        refused_at=0,
        env={"AUG_PERSISTENT": "1"},
    ),
    Case("self_resume.py", 6, refused="it resumes itself"),
]


def _start(case: Case, out: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    f = open(log, "w")
    return subprocess.Popen([PYTHON, str(CORPUS / case.script), str(out)], env=env, stdout=f, stderr=subprocess.STDOUT)


def _steps(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("step "))


def _preempt(proc: subprocess.Popen, log: Path, jobdir: Path, ready: Any) -> dict:
    poll("the moment to preempt", ready, timeout=120)
    (jobdir / "ack.json").unlink(missing_ok=True)
    signal_tree(proc.pid, signal.SIGUSR1)
    ack = poll("the Ack", lambda: read_ack(jobdir) or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, f"the job ended instead of waiting to be requeued:\n{log.read_text()[-2000:]}"
    signal_tree(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    assert isinstance(ack, dict) and ack["saved"] is True, ack
    return ack


def _equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.script[:-3] + ("-" + "-".join(c.env) if c.env else ""))
def test_script_preempted_three_times_is_bitwise_or_refused(tmp_path, case):
    import torch

    base, ref, out = tmp_path / "jobs", tmp_path / "ref" / "out.pt", tmp_path / "job" / "out.pt"
    ref.parent.mkdir()
    out.parent.mkdir()
    jobdir = base / "90"
    # The uninterrupted run, beside the job's runs (a refused script needs none)
    reference = None if case.refused else _start(case, ref, plain_env(**case.env), tmp_path / "ref.log")
    logs = [tmp_path / f"run{i}.log" for i in range(4)]
    slow = {**case.env, "TRAIN_STEP_SLEEP": PAUSE}

    def refused(run: int) -> None:
        proc = _start(case, out, job_env(base, 90, run, **slow), logs[run])
        assert proc.wait(timeout=120) == 2, logs[run].read_text()[-2000:]
        lines = [line for line in logs[run].read_text().splitlines() if line.startswith("teiresias: error")]
        assert len(lines) == 1 and case.refused in lines[0], logs[run].read_text()[-2000:]
        assert "Traceback" not in logs[run].read_text()
        assert not out.exists()

    try:
        if case.refused and case.refused_at == 0:
            refused(0)
            return
        spe = case.steps_per_epoch
        # 0: in the middle of the first epoch
        p = _start(case, out, job_env(base, 90, 0, **slow), logs[0])
        ack = _preempt(p, logs[0], jobdir, lambda: _steps(logs[0]) >= spe // 2)
        if case.refused:
            kept = _files(jobdir / "checkpoints")
            refused(1)
            assert _files(jobdir / "checkpoints") == kept
            return
        # 1: right after the restart, as the resumed run reaches its checkpoint
        p = _start(case, out, job_env(base, 90, 1, **slow), logs[1])
        ack1 = _preempt(p, logs[1], jobdir, lambda: "resumed from" in logs[1].read_text())
        assert ack1["step"] > ack["step"]
        # 2: at the end of an epoch (the signal comes after its last step but one)
        end = math.ceil((ack1["step"] + 2) / spe) * spe
        p = _start(case, out, job_env(base, 90, 2, **slow), logs[2])
        ack2 = _preempt(p, logs[2], jobdir, lambda: _steps(logs[2]) >= end - 1 - ack1["step"])
        assert ack2["step"] == end, f"checkpoint at step {ack2['step']}, not at the epoch's end {end}"
        # 3: to the end
        p = _start(case, out, job_env(base, 90, 3, **case.env), logs[3])
        assert p.wait(timeout=120) == 0, logs[3].read_text()[-2000:]
        assert reference is not None and reference.wait(timeout=120) == 0, (tmp_path / "ref.log").read_text()[-2000:]
        a, b = torch.load(ref, weights_only=True), torch.load(out, weights_only=True)
        assert _equal(a, b), "the preempted job's final state differs from the uninterrupted run's"
    finally:
        if reference is not None and reference.poll() is None:
            reference.kill()
