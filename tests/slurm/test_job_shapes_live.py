"""Job shapes real sites submit, against the real local Slurm cluster with
etc/job_submit.lua installed and the controller running as a subprocess:
non-adjacent GPU indices, jobs Slurm cannot start, a user's --begin and -H,
job arrays, GPU requests of zero or without a count, jobs larger than the
partition (docs/job-states.md, "Job shapes")."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import queue_rows, submit_sleep, wait_rounds

pytestmark = pytest.mark.slurm


def scontrol(cluster, *args: str) -> str:
    r = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=cluster.env, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def gpu_indices(cluster, job: int) -> list[int]:
    """The GPU indices Slurm gave a running job on its first node (scontrol -d)."""
    m = re.search(r"IDX:([0-9,-]+)", scontrol(cluster, "-d", "show", "job", "-o", str(job)))
    assert m, f"no IDX for job {job}"
    out: list[int] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# ---------------------------------------------------------------- item 1


def test_job_on_non_adjacent_gpu_indices_is_seen_running_with_its_gpu_count(cluster, make_controller):
    # Four 1-GPU jobs per node in the unmanaged partition; the ones on GPUs 0 and 2 end,
    # so every node's free GPUs are 1 and 3 (or 0 and 2): never adjacent.
    fill = {n: [submit_sleep(cluster, 1, 600, "other", "-w", n) for _ in range(4)] for n in cluster.nodes}
    for jobs in fill.values():
        for j in jobs:
            cluster.wait_for(j, "RUNNING", timeout=30)
    gone = [j for jobs in fill.values() for j in jobs if gpu_indices(cluster, j)[0] in (0, 2)]
    assert len(gone) == 8
    subprocess.run(["scancel", *map(str, gone)], env=cluster.env, check=True, timeout=30)
    for j in gone:
        cluster.wait_for(j, "CANCELLED", timeout=30)

    job = cluster.submit("sleep 600", "-p", "gpu", "-N", "4", "--gpus-per-node=2", "-t", "10")  # 8 GPUs
    ctl = make_controller(placement="spread").start()  # consolidate keeps an 8-GPU job off 4 half-free nodes
    sj = cluster.wait_for(job, "RUNNING", timeout=60)
    idx = gpu_indices(cluster, job)
    assert idx in ([0, 2], [1, 3]), idx  # non-adjacent, as on the sites that lost jobs
    assert sj.gpus == 8 and sj.num_nodes == 4
    wait_rounds(ctl, 3)
    rec = ctl.rec(job)
    assert rec.phase is Phase.RUNNING and rec.final_state is None and rec.gpus == 8
    assert not ctl.audit(job, "vanished") and "vanished" not in ctl.logtext()
    row = queue_rows(ctl, cluster)[job]
    assert (row["state"], row["gpus"], row["slurm_state"]) == ("RUNNING", 8, "RUNNING")


# ---------------------------------------------------------------- item 3


def test_job_waiting_on_a_dependency_is_not_started_and_preempts_nobody(cluster, make_controller):
    first = submit_sleep(cluster, 1, 600, "other")
    cluster.wait_for(first, "RUNNING", timeout=30)
    ctl = make_controller().start()
    running = [submit_sleep(cluster, 4) for _ in range(3)]
    for j in running:
        cluster.wait_for(j, "RUNNING", timeout=30)
    # Demoted to Q2 after 2 s: a new 16-GPU job in Q1 would preempt all three, if it were waiting.
    poll("running jobs demoted", lambda: all(ctl.rec(j).queue == 1 for j in running), 30)
    dep = submit_sleep(cluster, 16, 600, "gpu", f"--dependency=afterok:{first}")
    poll("the dependent job's reason", lambda: "dependency" in (ctl.rec(dep) and ctl.rec(dep).reason or ""), 30)
    wait_rounds(ctl, 4)
    assert not ctl.audit(dep, "start")
    assert all(not ctl.audit(j, "requeue") and ctl.rec(j).phase is Phase.RUNNING for j in running)
    assert cluster.job(dep).state == "PENDING"
    row = queue_rows(ctl, cluster)[dep]
    assert row["state"] == "PENDING" and f"afterok:{first}(unfulfilled)" in row["reason"], row


def test_a_start_slurm_refuses_is_backed_off_and_said_in_queue_and_audit(cluster, make_controller):
    # node4 has feature "fast" but all its GPUs are taken. The controller keeps to plain
    # constraints (test_controller_defects_live.py), not to grouped ones like "(fast)":
    # it places the job elsewhere, and Slurm cannot start it there.
    busy = submit_sleep(cluster, 4, 600, "other", "-w", "node4")
    cluster.wait_for(busy, "RUNNING", timeout=30)
    scontrol(cluster, "update", "nodename=node4", "availablefeatures=fast", "activefeatures=fast")
    try:
        job = submit_sleep(cluster, 1, 600, "gpu", "--constraint=(fast)")
        ctl = make_controller(preemption={"start_timeout_seconds": 30}).start()
        failed = poll("start-failed in the audit log", lambda: ctl.audit(job, "start-failed"), 30)
        assert "BadConstraints" in failed[0]["reason"] and failed[0]["retry_in_s"] == 60
        # Given up at once (not after the 30 s start timeout), held again, and not retried meanwhile.
        (start,) = ctl.audit(job, "start")
        assert failed[0]["time"] - start["time"] < 10
        sj = cluster.job(job)
        assert sj.held and sj.held_by_teiresias
        wait_rounds(ctl, 5)
        assert len(ctl.audit(job, "start")) == 1
        row = queue_rows(ctl, cluster)[job]
        assert "BadConstraints" in row["reason"] and "next try in" in row["reason"], row
    finally:
        scontrol(cluster, "update", "nodename=node4", "availablefeatures=", "activefeatures=")


def test_a_job_asking_per_node_keeps_its_node_count_and_size(cluster, make_controller):
    # Consolidate would put 4 GPUs on one node; the job asked 2 nodes x 2 GPUs.
    job = cluster.submit("sleep 600", "-p", "gpu", "-N", "2", "--gpus-per-node=2", "-t", "10")
    ctl = make_controller(placement="consolidate").start()
    sj = cluster.wait_for(job, "RUNNING", timeout=60)
    assert (sj.num_nodes, sj.gpus, sj.gpus_per_node) == (2, 4, 2)
    assert len(set(sj.nodes)) == 2
    (start,) = ctl.audit(job, "start")
    assert start["gpus"] == [2, 2]
    poll("the controller sees it running", lambda: ctl.rec(job).phase is Phase.RUNNING, 30)
    assert ctl.rec(job).gpus == 4


# ---------------------------------------------------------------- item 4


def test_begin_time_and_user_hold_are_kept(cluster, make_controller):
    later = submit_sleep(cluster, 1, 600, "gpu", "--begin=now+600")
    mine = submit_sleep(cluster, 1, 600, "gpu", "-H")
    witness = submit_sleep(cluster, 1)
    ctl = make_controller().start()
    cluster.wait_for(witness, "RUNNING", timeout=30)
    wait_rounds(ctl, 4)
    assert not ctl.audit(later, "start") and not ctl.audit(mine, "start")
    sj = cluster.job(later)
    assert sj.state == "PENDING" and sj.eligible_time and sj.eligible_time > time.time() + 500
    held = cluster.job(mine)
    assert held.state == "PENDING" and held.state_reason == "JobHeldUser" and not held.held_by_teiresias
    rows = queue_rows(ctl, cluster)
    assert "(--begin)" in rows[later]["reason"], rows[later]
    assert "held by its owner" in rows[mine]["reason"], rows[mine]
    # The owner lets it go: from then on it is the controller's, and it starts.
    scontrol(cluster, "release", str(mine))
    cluster.wait_for(mine, "RUNNING", timeout=30)
    # (Slurm may start it before the controller's next round: then it is taken over as it runs.)
    poll("the released job managed as running", lambda: ctl.rec(mine).phase is Phase.RUNNING, 30)


# ---------------------------------------------------------------- item 5


def array_tasks(cluster, array: int) -> dict[int, dict]:
    """Task id -> Slurm's own record (squeue --json) of the array's tasks split off
    their meta record, pending or running."""
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, env=cluster.env, timeout=30)
    assert out.returncode == 0, out.stderr
    return {
        j["array_task_id"]: j
        for j in json.loads(out.stdout)["jobs"]
        if j["array_job_id"] == array and j["array_task_id"] is not None and j["job_state"] in ("PENDING", "RUNNING")
    }


def test_array_tasks_are_held_and_started_one_by_one(cluster, make_controller):
    ctl = make_controller(policy={"queues": [100000]}).start()  # one queue: no demotion, no preemption
    array = cluster.submit("sleep 600", "-p", "gpu", "--array=0-5", "--gpus=4", "-t", "10", "-J", "arr")
    split = poll("6 tasks split off", lambda: (t := array_tasks(cluster, array)) and len(t) == 6 and t, 30)
    poll(
        "4 tasks running",
        lambda: sum(j["job_state"] == "RUNNING" for j in array_tasks(cluster, array).values()) == 4,
        30,
    )
    wait_rounds(ctl, 3)
    now = array_tasks(cluster, array)
    assert sum(j["job_state"] == "RUNNING" for j in now.values()) == 4  # 16 GPUs: no more, ever
    assert all(
        j["admin_comment"] == "teiresias:held" and j["priority"] == 0
        for j in now.values()
        if j["job_state"] == "PENDING"
    )
    recs = ctl.records()
    assert {j["job_id"] for j in split.values()} <= set(recs)
    assert all(recs[j["job_id"]].gpus == 4 for j in split.values())
    assert all(len(ctl.audit(j["job_id"], "start")) == (j["job_state"] == "RUNNING") for j in now.values())
    assert "resizing" not in ctl.logtext()


def test_array_tasks_are_preempted_one_by_one(cluster, make_controller):
    ctl = make_controller().start()
    array = cluster.submit("sleep 600", "-p", "gpu", "--array=0-5", "--gpus=2", "-t", "10", "-J", "arr")
    poll(
        "6 tasks running",
        lambda: (
            (t := array_tasks(cluster, array)) and len(t) == 6 and all(j["job_state"] == "RUNNING" for j in t.values())
        ),
        30,
    )
    tasks = {j["job_id"] for j in array_tasks(cluster, array).values()}
    poll("tasks demoted to Q2", lambda: all(ctl.rec(j).queue == 1 for j in tasks), 30)
    new = submit_sleep(cluster, 8)  # 4 GPUs free: two tasks of 2 GPUs must make room
    cluster.wait_for(new, "RUNNING", timeout=60)
    requeued = [j for j in tasks if ctl.audit(j, "requeue")]
    assert len(requeued) == 2, {j: ctl.rec(j).phase for j in tasks}
    assert all(len(ctl.audit(j, "requeue")) == 1 for j in requeued)
    assert "resizing" not in ctl.logtext()


# ---------------------------------------------------------------- item 6


def test_gpu_requests_lua_and_controller_agree(cluster, make_controller):
    for bad in ("--gres=gpu:-1", "--gres=gpu:abc"):
        r = subprocess.run(
            ["sbatch", "-p", "gpu", bad, "--wrap", "sleep 1"],
            capture_output=True,
            text=True,
            env=cluster.env,
            cwd=cluster.jobs_dir,
            timeout=30,
        )
        assert r.returncode != 0 and "teiresias: GPU request" in r.stderr and "whole GPU count" in r.stderr, r
    zero = [cluster.submit("sleep 600", "-p", "gpu", a, "-t", "10") for a in ("--gres=gpu:0", "--gpus=0")]
    huge = submit_sleep(cluster, 100)
    ctl = make_controller().start()
    for j in zero:  # no GPU asked: a CPU job, run by Slurm, never held
        cluster.wait_for(j, "RUNNING", timeout=30)
    poll("the huge job's reason", lambda: ctl.rec(huge) and "never start" in ctl.rec(huge).reason, 30)
    rows = queue_rows(ctl, cluster)
    assert not set(zero) & set(rows)
    assert "asks for 100 GPUs; partition gpu has 16 in all" in rows[huge]["reason"], rows[huge]
    assert cluster.job(huge).held_by_teiresias
