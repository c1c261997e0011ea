"""Placement keeps to the nodes a job's owner allows and requires (Slurm's -w, -x,
--constraint, a GPU type: Job.nodes_allowed / nodes_required), in every placement
and in the allocation walk's preemptions (issue 20 B6)."""

from dataclasses import replace

import pytest

from teiresias.policy.placement import ConsolidatePlacement, ProfilePlacement, SpreadPlacement
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap

PLACEMENTS = [ConsolidatePlacement(), SpreadPlacement(), ProfilePlacement()]


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.name)
def test_excluded_nodes_are_never_used(placement) -> None:
    c = cluster(4, 4)  # s0n0..s0n3, 4 GPUs each
    job = replace(pending(1, 4), nodes_allowed=frozenset({"s0n2", "s0n3"}))
    free = {"s0n0": 4, "s0n1": 4, "s0n2": 4, "s0n3": 4}
    assert set(placement.place(job, free, c).nodes) <= {"s0n2", "s0n3"}
    short = {**free, "s0n2": 1, "s0n3": 2}  # 3 allowed GPUs free, 8 elsewhere
    assert placement.place(job, short, c) is None
    assert placement.place(replace(job, num_gpus=9), free, c) is None  # 8 GPUs allowed in all


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.name)
def test_required_nodes_are_all_in_the_placement(placement) -> None:
    c = cluster(4, 4)
    free = {"s0n0": 4, "s0n1": 4, "s0n2": 2, "s0n3": 4}
    one = replace(pending(1, 1), nodes_required=frozenset({"s0n3"}))
    assert placement.place(one, free, c).nodes == ("s0n3",)
    big = replace(pending(2, 6), nodes_required=frozenset({"s0n2"}))
    got = placement.place(big, free, c)
    assert "s0n2" in got.nodes and got.num_gpus == 6
    assert placement.place(one, {**free, "s0n3": 0}, c) is None  # its node is full: it waits
    two = replace(pending(3, 1), nodes_required=frozenset({"s0n0", "s0n1"}))
    assert placement.place(two, free, c) is None  # 1 GPU cannot be on two nodes


def test_the_walk_preempts_on_the_required_node_only() -> None:
    """A job that must run on s0n1 evicts the low-priority job there, not the one on s0n0,
    and without the requirement it would have taken the idle node."""
    las = build_policy("las", PolicyParams(queues=(100.0,)))
    q2 = dict(executed_time=200.0, first_start_time=0.0)
    jobs = [running(1, 4, {"s0n0": 4}, submit=0.0, **q2), running(2, 4, {"s0n1": 4}, submit=5.0, **q2)]
    free_node = snap(cluster(3, 4), *jobs, pending(3, 4, submit=10.0), now=20.0)
    assert free_node.free_gpus()["s0n2"] == 4
    plan = las.decide(free_node)
    assert plan.preempt == () and plan.start[3].nodes == ("s0n2",)
    pinned = replace(pending(3, 4, submit=10.0), nodes_required=frozenset({"s0n0"}))
    plan = las.decide(snap(cluster(3, 4), *jobs, pinned, now=20.0))
    assert plan.preempt == (1,) and plan.start[3].nodes == ("s0n0",) and 2 in plan.keep


@pytest.mark.parametrize("placement", PLACEMENTS, ids=lambda p: p.name)
def test_a_job_asked_per_node_gets_its_own_shape_or_waits(placement) -> None:
    """Job.gpus_per_node (Slurm's `-N 4 --gres=gpu:2`): exactly its node count with its
    per-node GPUs, tightest fits first; never 4 + 4 on two nodes (the soak, seed 20: j19)."""
    c = cluster(4, 4)
    job = replace(pending(1, 8), gpus_per_node=2)
    free = {"s0n0": 4, "s0n1": 3, "s0n2": 2, "s0n3": 4}
    got = placement.place(job, free, c)
    assert [(a.node, a.gpus) for a in got.allocations] == [(n, 2) for n in ("s0n0", "s0n1", "s0n2", "s0n3")]
    assert placement.place(job, {**free, "s0n1": 1}, c) is None  # only 3 nodes with 2 free
    three = replace(pending(2, 4), gpus_per_node=2)
    assert placement.place(three, free, c).nodes == ("s0n1", "s0n2")  # the least left over
    pinned = replace(three, nodes_required=frozenset({"s0n3"}), nodes_allowed=frozenset({"s0n0", "s0n3"}))
    assert placement.place(pinned, free, c).nodes == ("s0n0", "s0n3")
