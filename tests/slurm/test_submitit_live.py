"""A job that checkpoints and requeues itself, launched by the real submitit
(PyPI; the project's test extra), preempted by the live controller.

submitit writes ``#SBATCH --signal=USR2@90`` into its batch script and, on
that signal, calls the function's ``checkpoint()``, pickles the result and
runs ``scontrol requeue`` itself. The controller must send *that* signal to
the job's steps, leave the requeue to the job, hold it when it comes back
pending, and start it again later, so that the job resumes through its own
checkpoint and finishes with every step done exactly once.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import REPO, submit_sleep

submitit = pytest.importorskip("submitit", reason="submitit is in the test extra: pip install -e .[test]")

pytestmark = pytest.mark.slurm


class Counter(submitit.helpers.Checkpointable):
    """Counts ``total`` steps into ``out``, one line per step; a run's first
    line says where it starts, and ``checkpoint()`` says what it saved."""

    def __init__(self, out: str, total: int, pause: float) -> None:
        self.out, self.total, self.pause = out, total, pause
        self.step = 0

    def _line(self, text: str) -> None:
        with open(self.out, "a") as f:
            f.write(text + "\n")

    def __call__(self) -> int:
        self._line(f"start {os.environ.get('SLURM_RESTART_COUNT', '0')} {self.step}")
        while self.step < self.total:
            time.sleep(self.pause)
            # A step is its line and its count together: submitit's USR2 handler
            # (checkpoint + requeue) runs between two steps, never inside one.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
            self._line(f"step {self.step}")
            self.step += 1
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        return self.step

    def checkpoint(self, *args, **kwargs):
        self._line(f"checkpoint {self.step}")
        return super().checkpoint(*args, **kwargs)


def test_a_submitit_job_is_preempted_with_its_own_signal_and_resumes_from_its_checkpoint(
    cluster, make_controller, tmp_path, monkeypatch
):
    ctl = make_controller().start()
    # submitit runs sbatch from our environment; the job's python must find this module.
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    out = tmp_path / "steps.txt"
    total = 60
    executor = submitit.SlurmExecutor(folder=tmp_path / "submitit", max_num_timeout=3)
    # time=60: submitit takes a signal before 48 min as a preemption, not a timeout.
    executor.update_parameters(partition="gpu", gpus_per_node=4, time=60, signal_delay_s=90)
    job = executor.submit(Counter(str(out), total, 0.25))
    job_id = int(job.job_id)
    cluster.wait_for(job_id, "RUNNING", timeout=60)
    poll("the job counts", lambda: out.exists() and "step 3" in out.read_text(), 60)
    # 4 GPUs for > 2 s is past the 8 GPU-s threshold: demoted to Q2.
    poll("submitit job demoted to Q2", lambda: ctl.rec(job_id).queue == 1, 30)

    big = submit_sleep(cluster, 16, 5)  # needs the whole cluster: the submitit job must go
    cluster.wait_for(big, "RUNNING", timeout=120)

    (sig,) = ctl.audit(job_id, "signal")
    assert (sig["signal"], sig["scope"]) == ("USR2", "steps")  # its own signal, to its steps (no B:)
    assert "--signal=USR2@90" in sig["reason"]
    # It requeued itself: the controller neither requeued nor killed it, and holds it for the policy.
    assert ctl.audit(job_id, "requeue") == []
    held = [h for h in ctl.audit(job_id, "hold") if "requeued itself" in h["reason"]]
    assert held, ctl.audit(job_id)
    rec = ctl.rec(job_id)
    assert rec.preemptions == 1 and rec.signal_time is None
    assert rec.ckpt_seconds is None  # submitit tells nobody what its checkpoint cost

    cluster.wait_for(job_id, "COMPLETED", timeout=180)
    lines = out.read_text().split("\n")[:-1]
    steps = [int(line.split()[1]) for line in lines if line.startswith("step ")]
    assert steps == list(range(total)), lines  # none lost, none redone
    (ckpt,) = [int(line.split()[1]) for line in lines if line.startswith("checkpoint ")]
    starts = [tuple(map(int, line.split()[1:])) for line in lines if line.startswith("start ")]
    # The second run is Slurm's restart 1 and begins exactly where the checkpoint was taken.
    assert starts == [(0, 0), (1, ckpt)] and 3 < ckpt < total
    assert lines.index(f"checkpoint {ckpt}") == lines.index(f"step {ckpt - 1}") + 1
    poll("record finished", lambda: ctl.rec(job_id).phase is Phase.FINISHED, 30)
    final = ctl.rec(job_id)
    assert final.final_state == "COMPLETED" and final.preemptions == 1
    assert ctl.alive()
