"""Live defects of issue 20 part B, each on the real local Slurm cluster with
etc/job_submit.lua installed and the controller running as a subprocess:
requeues taken for new jobs, runs shorter than a round, holds placed after
submission, jobs Slurm can never start, node lists, heterogeneous jobs, a GPU
request dropped on a held job, array throttles, two controllers on one
cluster, and plain jobs that thrash (docs/job-states.md, docs/controller.md)."""

from __future__ import annotations

import subprocess

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import submit_sleep

pytestmark = pytest.mark.slurm


def scontrol(cluster, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["scontrol", *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cluster.conf}", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=cluster.env, timeout=30)


# ---------------------------------------------------------------- B1


def test_a_requeue_by_an_admin_keeps_the_jobs_record_and_service(cluster, make_controller):
    """Slurm counts the restart at the requeue but moves SubmitTime only once the run has
    finished completing (KillWait; this job ignores SIGTERM, so for ~KillWait s): a round
    in between used to take the job for a new one under the same id (`replaced`)."""
    ctl = make_controller(policy={"queues": [100000]}).start()
    job = cluster.submit("trap '' TERM; sleep 600", "-p", "gpu", "--gpus=1", "-t", "10")
    cluster.wait_for(job, "RUNNING", timeout=30)
    poll("the controller sees it run", lambda: (r := ctl.rec(job)) and r.run_start and r.last_running_seen, 30)
    poll("2 s of service", lambda: ctl.rec(job).last_running_seen - ctl.rec(job).run_start >= 2, 30)
    out = scontrol(cluster, "requeue", str(job))  # an admin's requeue: not the controller's
    assert out.returncode == 0, out.stderr
    # Started again by the controller (held on sight, then released), on the same record.
    poll(
        "the second run",
        lambda: (r := ctl.rec(job)) and r.phase is Phase.RUNNING and r.run_restart == 1,
        60,
    )
    rec = ctl.rec(job)
    assert not ctl.audit(job, "replaced"), ctl.audit(job, "replaced")
    assert rec.closed_run_seconds >= 2 and rec.submit_restart == 1 and rec.final_state is None
    assert len(ctl.audit(job, "start")) == 2


# ---------------------------------------------------------------- B3


def test_a_run_between_two_rounds_gets_its_service_from_slurms_times(cluster, make_controller):
    """README's `--once` flow: the first round starts the job, it runs 2 s and ends before
    the second round. It used to be recorded with no service, no first start and a
    queueing delay equal to its JCT."""
    ctl = make_controller()
    job = cluster.submit("sleep 2", "-p", "gpu", "--gpus=2", "-t", "5")
    first = ctl.cli("controller", "run", "--once")
    assert first.returncode == 0, first.stderr
    assert ctl.audit(job, "start"), first.stdout
    sj = cluster.wait_for(job, "COMPLETED", timeout=60)
    second = ctl.cli("controller", "run", "--once")
    assert second.returncode == 0, second.stderr
    rec = ctl.rec(job)
    assert rec.phase is Phase.FINISHED and rec.final_state == "COMPLETED"
    assert rec.first_start_time == sj.start_time and rec.closed_run_seconds == sj.end_time - sj.start_time >= 2
    (done,) = ctl.audit(job, "finished")
    assert done["attained_gpu_seconds"] == 2 * rec.closed_run_seconds
    assert done["queueing_delay"] == pytest.approx(done["jct"] - rec.closed_run_seconds, abs=0.01)
