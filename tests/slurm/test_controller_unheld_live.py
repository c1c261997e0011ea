"""Jobs Slurm can never start, on the real local cluster WITHOUT job_submit.lua (as on
a site that runs without it, or for jobs submitted before it was installed: with it,
tests/slurm/test_controller_defects_live.py shows them refused at submission):
GPU types no node has, and heterogeneous jobs (issue 20 B5, B7). The controller's
safety net holds what it manages; it must never preempt anyone for such a job."""

from __future__ import annotations

import subprocess

import pytest

from slurm_plugin.backends.base import HOLD_MARK
from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import ControllerProc, submit_sleep, wait_rounds

pytestmark = pytest.mark.slurm


def test_jobs_slurm_can_never_start_preempt_nobody(clean_slurm, tmp_path):
    """Typed GPUs the cluster lacks (`--gres=gpu:a100:2`, `--gpus-per-node=v100:1`,
    `gpu:nosuchtype:4`) preempted other users' running jobs once per back-off retry,
    and a heterogeneous job waited for ever ("Job resizing not supported")."""
    cluster = clean_slurm
    running = [submit_sleep(cluster, 4) for _ in range(4)]  # every GPU, started by Slurm itself
    for j in running:
        cluster.wait_for(j, "RUNNING", timeout=30)
    ctl = ControllerProc(tmp_path, cluster, policy={"name": "las", "queues": [2]})
    try:
        ctl.start()
        poll("the running jobs in Q2", lambda: all((r := ctl.rec(j)) and r.queue == 1 for j in running), 30)
        # sbatch refuses them unless they are submitted held ("Requested node configuration
        # is not available"): a job_submit.lua from before this release held and marked
        # them (today's refuses them); here -H and the mark by hand, as it left them.
        typed = [
            cluster.submit("sleep 600", "-p", "gpu", "-H", ask, "-t", "10")
            for ask in ("--gres=gpu:a100:2", "--gpus-per-node=v100:1", "--gres=gpu:nosuchtype:4")
        ]
        het = cluster.submit("sleep 600", "-p", "gpu", "-H", "--gpus=1", "-t", "10", ":", "-p", "gpu", "--gpus=1")
        for j in (*typed, het, het + 1):
            mark = ["scontrol", "update", f"jobid={j}", f"admincomment={HOLD_MARK}"]
            subprocess.run(mark, env=cluster.env, check=True, timeout=30)
        for j in typed:
            poll(f"job {j} not waiting", lambda j=j: "can never start" in ((r := ctl.rec(j)) and r.reason or ""), 30)
        wait_rounds(ctl, 5)
        assert not ctl.audit(action="requeue") and not ctl.audit(action="signal")
        assert all(ctl.rec(j).phase is Phase.RUNNING for j in running)
        assert "GPU type a100; no node of partition gpu has it" in ctl.rec(typed[0]).reason
        assert all(not ctl.audit(j, "start") for j in typed)
        # The heterogeneous job is handed to Slurm (mark cleared, released: Slurm's backfill
        # starts it when GPUs are free); the controller never starts it.
        assert ctl.rec(het) is None and ctl.audit(het, "unmanaged") and ctl.audit(het + 1, "unmanaged")
        sj = cluster.job(het)
        assert not sj.held and "teiresias:held" not in sj.admin_comment and not ctl.audit(het, "start")
    finally:
        ctl.stop()
