"""The plain-quota baseline shows the sharing anomaly; buddy cells do not (HiveD §2, in miniature)."""

from __future__ import annotations

from teiresias.cells import config
from teiresias.cells.quota import QuotaPolicy
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import Cluster, JobId, Placement, Snapshot
from teiresias.policy.registry import build_policy
from teiresias.policy.testing import pending, running

NODES = [f"gpu{i}" for i in range(1, 5)]
CLUSTER = Cluster.from_tiresias_spec(1, 4, 8, node_names=NODES)
CFG = config.parse(
    {
        "cell_types": {
            "gpu": {},
            "socket": {"child": "gpu", "count": 4},
            "node": {"child": "socket", "count": 2, "node": True},
        },
        "physical_cells": [{"type": "node", "nodes": [n]} for n in NODES],
        "virtual_clusters": {
            "a": {"accounts": ["ta"], "quota": {"node": 1}},
            "b": {"accounts": ["tb"], "quota": {"node": 3}},
        },
    },
    "test",
    cluster=CLUSTER,
)


def spread_snapshot() -> Snapshot:
    # Tenant b runs 2-GPU jobs on every node (16 GPUs, within its 24-GPU quota); a asks for 8.
    jobs = [running(10 + i, 2, {n: 2}, submit=float(i), account="tb") for i, n in enumerate(NODES * 2)]
    jobs.append(pending(1, 8, submit=100.0, account="ta"))
    return Snapshot(200.0, CLUSTER, jobs)


def test_quota_baseline_leaves_a_tenant_within_quota_waiting_for_affinity() -> None:
    plan = QuotaPolicy(CFG, build_policy("fifo")).decide(spread_snapshot())
    assert plan.start == {} and plan.preempt == ()
    assert "sharing anomaly" in plan.reasons[JobId(1)]
    assert len(plan.guaranteed) == 8  # every b job is inside b's GPU quota, so none can be preempted


def test_cells_give_that_tenant_a_node_at_the_cost_of_opportunistic_jobs() -> None:
    plan = CellsPolicy(CFG, build_policy("fifo")).decide(spread_snapshot())
    # b's 3 node cells hold 6 of its jobs; the 2 jobs on the fourth node are opportunistic
    # and give way to a's guaranteed whole node.
    assert len(plan.start) == 1 and plan.start[JobId(1)].num_nodes == 1
    node = plan.start[JobId(1)].nodes[0]
    assert set(plan.preempt) == {j for j in (10, 11, 12, 13, 14, 15, 16, 17) if NODES[(j - 10) % 4] == node}
    assert len(plan.preempt) == 2
    # b's guaranteed jobs are packed into its 3 node cells (half used each), a's node is whole.
    assert plan.report.fragmentation == 0.75


def test_quota_baseline_places_within_quota_jobs_with_affinity_and_preempts_opportunistic() -> None:
    jobs = [running(20 + i, 4, {n: 4}, submit=float(i), account="guest") for i, n in enumerate(NODES)]
    jobs.append(pending(1, 8, submit=50.0, account="ta"))
    jobs.append(pending(2, 12, submit=60.0, account="tb"))
    plan = QuotaPolicy(CFG, build_policy("fifo")).decide(Snapshot(100.0, CLUSTER, jobs))
    assert plan.start[JobId(1)] == Placement.of({"gpu1": 8})
    assert plan.start[JobId(2)].num_gpus == 12 and sorted(a.gpus for a in plan.start[JobId(2)].allocations) == [4, 8]
    # A whole node each costs one preemption; the 4-GPU remainder fits beside job 22: no more.
    assert set(plan.preempt) == {JobId(20), JobId(21)}
    assert plan.start[JobId(2)] == Placement.of({"gpu2": 8, "gpu3": 4})
    assert {JobId(22), JobId(23)} <= set(plan.keep)
