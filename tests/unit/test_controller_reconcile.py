"""Slurm's view + stored records -> the policy's Snapshot (pure; Slurm data as squeue reports it)."""

from __future__ import annotations

from slurm_plugin.backends.base import HOLD_MARK, SlurmJob, SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.reconcile import reconcile, running_placement
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import JobState, Placement

CFG = parse_config(
    {
        "partitions": ["gpu"],
        "preemption": {"start_timeout_seconds": 10},
        "topology": {"switches": {"s0": ["node1", "node2"], "s1": ["node3"]}},
    }
)


def job(
    job_id: int,
    state: str = "PENDING",
    *,
    gpus: int = 1,
    nodes=(),
    partition: str = "gpu",
    held: bool = True,
    restart: int = 0,
    start=None,
    end=None,
    **kw,
) -> SlurmJob:
    kw.setdefault("admin_comment", HOLD_MARK if held else "")  # held by job_submit.lua / the controller
    return SlurmJob(
        job_id=job_id,
        name=f"j{job_id}",
        user="alice",
        account="a",
        partition=partition,
        state=state,
        state_reason="JobHeldAdmin" if held else "None",
        priority=0 if held else 5,
        restart_count=restart,
        requeue=True,
        held=held,
        gpus=gpus,
        num_nodes=max(len(nodes), 1),
        nodes=tuple(nodes),
        required_nodes=(),
        submit_time=10.0 + job_id,
        eligible_time=None,
        start_time=start,
        end_time=end,
        time_limit_minutes=None,
        command="x",
        comment="",
        **kw,
    )


def node(name: str, used: int = 0, state=("IDLE",), parts=("gpu",)) -> SlurmNode:
    return SlurmNode(name, frozenset(state), 4, used, tuple(parts), cpus=8, mem_mb=8192)


NODES = [node("node1"), node("node2"), node("node3"), node("other1", parts=("cpu",))]


def test_cluster_is_the_managed_partitions_nodes_on_their_switches():
    out = reconcile(CFG, {}, [], NODES, 100.0)
    c = out.snapshot.cluster
    assert [n.name for n in c.nodes] == ["node1", "node2", "node3"]
    assert c.node("node3").switch == "s1" and c.total_gpus == 12


def test_new_jobs_are_pending_and_other_partitions_and_cpu_jobs_are_ignored():
    out = reconcile(
        CFG, {}, [job(1, gpus=2), job(2, partition="cpu", held=False), job(3, gpus=0, held=False)], NODES, 100.0
    )
    assert [j.job_id for j in out.snapshot.jobs] == [1]
    j = out.snapshot.jobs[0]
    assert j.state is JobState.PENDING and j.num_gpus == 2 and j.waiting_time == 100.0 - 11.0
    assert out.to_hold == {}


def test_unheld_pending_job_is_to_be_held():
    out = reconcile(CFG, {}, [job(3, held=False)], NODES, 100.0)
    assert 3 in out.to_hold


def test_running_job_gets_its_placement_and_other_gpus_are_unavailable():
    nodes = [node("node1", used=4, state=("MIXED",)), node("node2", state=("IDLE", "DRAIN")), node("node3")]
    jobs = [job(4, "RUNNING", gpus=3, nodes=("node1",), held=False, start=50.0)]
    out = reconcile(CFG, {}, jobs, nodes, 100.0)
    (j,) = out.snapshot.jobs
    assert j.state is JobState.RUNNING and j.placement == Placement.of({"node1": 3})
    assert j.executed_time == 50.0 and j.attained_service == 150.0
    # 1 GPU of node1 used by something else (another partition), node2 drained.
    assert out.snapshot.unavailable == {"node1": 1, "node2": 4}
    assert out.snapshot.free_gpus() == {"node1": 0, "node2": 0, "node3": 4}


def test_starting_job_holds_its_planned_gpus_then_times_out():
    r = JobRecord(
        job_id=5, gpus=2, submit_time=15.0, phase=Phase.STARTING, phase_since=100.0, planned=Placement.of({"node3": 2})
    )
    out = reconcile(CFG, {5: r}, [job(5, held=False)], NODES, 105.0)
    (j,) = out.snapshot.jobs
    assert j.state is JobState.RUNNING and j.placement == Placement.of({"node3": 2})
    assert out.to_hold == {}
    out = reconcile(CFG, {5: r}, [job(5, held=False)], NODES, 111.0)
    # a failed start is backed off (loop.py): the job does not wait for GPUs meanwhile
    assert 5 in out.to_hold and 5 in out.start_failed and out.snapshot.jobs == ()


def test_finished_and_vanished_jobs_leave_the_queue():
    r6 = JobRecord(
        job_id=6, gpus=1, submit_time=16.0, phase=Phase.RUNNING, run_start=50.0, run_restart=0, last_running_seen=90.0
    )
    r7 = JobRecord(job_id=7, gpus=1, submit_time=17.0, phase=Phase.PENDING)
    out = reconcile(CFG, {6: r6, 7: r7}, [job(6, "COMPLETED", held=False, start=50.0, end=95.0)], NODES, 100.0)
    assert out.finished == [6] and out.vanished == [7]
    assert r6.phase is Phase.FINISHED and r6.closed_run_seconds == 45.0 and r6.final_state == "COMPLETED"
    assert r7.final_state == "VANISHED"
    assert out.snapshot.jobs == ()


def test_jobs_in_transit_are_left_out_but_their_gpus_stay_busy():
    r = JobRecord(job_id=8, gpus=4, submit_time=18.0, phase=Phase.PENDING)
    nodes = [node("node1", used=4, state=("MIXED",)), node("node2"), node("node3")]
    out = reconcile(CFG, {8: r}, [job(8, "COMPLETING", gpus=4, nodes=("node1",), held=False)], nodes, 100.0)
    assert out.snapshot.jobs == () and out.snapshot.unavailable == {"node1": 4}


def test_placement_of_a_multi_node_job_without_our_plan_is_split_evenly():
    r = JobRecord(job_id=9, gpus=5)
    p = running_placement(job(9, "RUNNING", gpus=5, nodes=("node1", "node2")), r)
    assert p == Placement.of({"node1": 3, "node2": 2})
    r.planned = Placement.of({"node1": 4, "node2": 1})
    assert running_placement(job(9, "RUNNING", gpus=5, nodes=("node2", "node1")), r) == r.planned
