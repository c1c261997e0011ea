"""Fast checks of the job-shape rules (reconcile.not_waiting_reason, never_fits,
array meta records; enact.fit_shape), beside the live tests in
tests/slurm/test_job_shapes_live.py which run them against the real Slurm."""

from __future__ import annotations

from dataclasses import replace

from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.enact import fit_shape
from slurm_plugin.controller.reconcile import never_fits, not_waiting_reason, reconcile
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Placement
from tests.unit.round_support import held_job

CFG = parse_config({"partitions": ["gpu"]})
NODES = [SlurmNode(f"node{i}", frozenset({"IDLE"}), 4, 0, ("gpu",)) for i in range(1, 5)]
NOW = 1000.0


def rec(job_id: int = 1) -> JobRecord:
    return JobRecord(job_id=job_id, gpus=2, submit_time=100.0, phase=Phase.PENDING, phase_since=100.0)


def starting(job_id: int = 1, for_s: float = 2.0) -> JobRecord:
    """A 2-GPU job released onto node<job_id> ``for_s`` seconds ago, not started yet."""
    return JobRecord(
        job_id=job_id,
        gpus=2,
        submit_time=100.0,
        phase=Phase.STARTING,
        phase_since=NOW - for_s,
        planned=Placement.of({f"node{job_id}": 2}),
    )


def test_only_the_projects_own_hold_is_waiting():
    assert not_waiting_reason(held_job(), rec(), NODES, NOW) is None
    why = not_waiting_reason(held_job(admin_comment=""), rec(), NODES, NOW)
    assert why and why.startswith("held by its owner (JobHeldUser)")
    why = not_waiting_reason(held_job(admin_comment="", state_reason="JobHeldAdmin"), rec(), NODES, NOW)
    assert why and why.startswith("held by an admin")


def test_dependency_and_begin_time():
    assert "waiting for its dependency" in not_waiting_reason(
        held_job(dependency="afterok:7(unfulfilled)"), rec(), NODES, NOW
    )
    assert "never be satisfied" in not_waiting_reason(held_job(dependency="afterok:7(failed)"), rec(), NODES, NOW)
    assert "(--begin)" in not_waiting_reason(held_job(eligible_time=NOW + 600), rec(), NODES, NOW)
    # after a requeue the begin time is Slurm's: the job waits for GPUs
    assert not_waiting_reason(held_job(eligible_time=NOW + 100, restart_count=1), rec(), NODES, NOW) is None


def test_sizes_no_partition_can_give():
    assert never_fits(held_job(gpus=16), NODES) is None
    assert "asks for 100 GPUs; partition gpu has 16 in all" in never_fits(held_job(gpus=100), NODES)
    assert never_fits(held_job(gpus=8, gpus_per_node=4, num_nodes=2), NODES) is None
    assert "with 8 GPUs each" in never_fits(held_job(gpus=8, gpus_per_node=8, num_nodes=1), NODES)
    assert "5 node(s)" in never_fits(held_job(gpus=10, gpus_per_node=2, num_nodes=5), NODES)


def test_backoff_keeps_a_job_out_until_it_is_over():
    assert "next try in 30s" in not_waiting_reason(held_job(), rec(), NODES, NOW, (NOW + 30, "refused"))
    assert not_waiting_reason(held_job(), rec(), NODES, NOW, (NOW - 1, "refused")) is None


def test_array_meta_record_is_split_not_scheduled():
    meta = held_job(9, array_job_id=9, array_tasks="0-1,3", gpus=1)
    task = held_job(10, array_job_id=9, array_task_id=2, gpus=1)
    out = reconcile(CFG, {}, [meta, task], NODES, NOW)
    assert out.to_split == ["9_0", "9_1", "9_3"]
    assert [j.job_id for j in out.snapshot.jobs] == [10] and task.target == "9_2" and meta.target == "9"


def test_not_waiting_jobs_are_out_of_the_snapshot():
    out = reconcile(CFG, {}, [held_job(1), held_job(2, gpus=100), held_job(3, admin_comment="")], NODES, NOW)
    assert [j.job_id for j in out.snapshot.jobs] == [1]
    assert set(out.not_waiting) == {2, 3} and out.to_hold == {}


def test_fit_shape_keeps_node_count_and_per_node_gpus():
    per_node = held_job(gpus=4, gpus_per_node=2, num_nodes=2)
    free = {"node1": 4, "node2": 1, "node3": 2, "node4": 3}
    fitted = fit_shape(Placement.of({"node1": 4}), per_node, free, list(free))
    assert fitted == Placement.of([("node1", 2), ("node4", 2)])
    assert fit_shape(Placement.of({"node1": 2, "node3": 2}), per_node, free, list(free)) == Placement.of(
        {"node1": 2, "node3": 2}
    )
    assert fit_shape(Placement.of({"node1": 4}), per_node, {"node1": 4, "node2": 1}, ["node1", "node2"]) is None
    plain = replace(per_node, gpus_per_node=None)
    assert fit_shape(Placement.of({"node1": 4}), plain, free, list(free)) == Placement.of({"node1": 4})


def test_array_meta_record_without_a_hold_is_held_whole():
    meta = held_job(9, array_job_id=9, array_tasks="0-5", held=False, priority=5, state_reason="None", admin_comment="")
    out = reconcile(CFG, {}, [meta], NODES, NOW)
    assert out.unheld_arrays == [9] and len(out.to_split) == 6 and out.snapshot.jobs == ()


def test_a_job_of_several_partitions_is_sized_against_all_of_them():
    nodes = [*NODES, SlurmNode("big1", frozenset({"IDLE"}), 8, 0, ("big",))]
    assert never_fits(held_job(gpus=20, partition="gpu,big"), nodes) is None
    assert "has 24 in all" in never_fits(held_job(gpus=30, partition="gpu,big"), nodes)
    assert never_fits(held_job(gpus=8, gpus_per_node=8, partition="gpu,big"), nodes) is None
    assert never_fits(held_job(gpus=100, partition="nowhere"), nodes) is None  # its nodes unknown: no verdict


def test_a_job_its_owner_holds_while_starting_is_theirs():
    r = starting(for_s=100)
    out = reconcile(CFG, {1: r}, [held_job(admin_comment="")], NODES, NOW)
    assert r.phase is Phase.PENDING and r.planned is None
    assert out.to_hold == {} and "held by its owner" in out.not_waiting[1] and out.snapshot.jobs == ()


def test_slurms_own_priority_0_on_a_refused_start_is_a_failed_start_not_a_users_hold():
    # Slurm 22.05 sets priority 0 itself on a job it cannot start (BadConstraints).
    r = starting()
    out = reconcile(CFG, {1: r}, [held_job(admin_comment="", state_reason="BadConstraints")], NODES, NOW)
    assert r.phase is Phase.STARTING and "BadConstraints" in out.start_failed[1] and 1 in out.to_hold


def test_req_node_not_avail_on_usable_nodes_is_waited_out():
    # Slurm's word for a node that is down and for one a job above it could not start on
    # (tests/slurm/test_controller_defects_live.py::test_a_job_slurm_passes_over_for_...).
    released = held_job(held=False, admin_comment="", state_reason="ReqNodeNotAvail", required_nodes=("node1",))
    out = reconcile(CFG, {1: starting()}, [released], NODES, NOW)
    assert out.start_failed == {} and out.to_hold == {}
    drained = [replace(NODES[0], state=frozenset({"IDLE", "DRAIN"})), *NODES[1:]]
    out = reconcile(CFG, {1: starting()}, [released], drained, NOW)
    assert "ReqNodeNotAvail" in out.start_failed[1] and 1 in out.to_hold


def test_a_start_passed_over_for_a_job_released_above_it_is_not_timed_out():
    # Slurm stops its pass at a released job it cannot start; those below wait (Priority).
    def released(job_id: int, reason: str, priority: int):
        return held_job(job_id, held=False, admin_comment="", state_reason=reason, priority=priority)

    top, below = starting(1, for_s=60), starting(2, for_s=60)  # past the start timeout (30 s)
    jobs = [released(1, "Resources", 1000002), released(2, "Priority", 1000001)]
    out = reconcile(CFG, {1: top, 2: below}, jobs, NODES, NOW)
    assert list(out.start_failed) == [1]  # the one Slurm could not start times out
    assert below.phase is Phase.STARTING and below.phase_since == NOW  # its own clock from now
    alone = starting(2, for_s=60)
    out = reconcile(CFG, {2: alone}, [released(2, "Priority", 1000001)], NODES, NOW)
    assert list(out.start_failed) == [2]  # nothing released above it: its own timeout
