"""Faults: a DOWN/DRAIN node's cells are unbound and the VC rebound elsewhere; lost guarantee is reported."""

from __future__ import annotations

from pathlib import Path

from teiresias.cells import config
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import Cluster, JobId, Placement, Snapshot
from teiresias.policy.registry import build_policy
from teiresias.policy.testing import pending, running

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml"
NODES = ["node1", "node2", "node3", "node4"]
CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=NODES)
CFG = config.load(EXAMPLE, cluster=CLUSTER)


def snap(*jobs, unavailable=None) -> Snapshot:
    return Snapshot(100.0, CLUSTER, list(jobs), dict(unavailable or {}))


def bound(plan, vc: str) -> set[str]:
    return {b.cell for b in plan.cells.bindings if b.vc == vc}


def test_drain_keeps_the_running_job_then_moves_the_binding() -> None:
    p = CellsPolicy(CFG, build_policy("fifo"))
    plan1 = p.decide(snap(pending(1, 4, submit=1.0, account="team-a")))
    assert plan1.start[JobId(1)] == Placement.of({"node1": 4})
    assert bound(plan1, "vc-a") == {"node1"}

    # node1 is set DRAIN while job 1 runs: the job goes on, its cell stays bound.
    job1 = running(1, 4, {"node1": 4}, submit=1.0, account="team-a")
    plan2 = p.decide_cells(snap(job1, unavailable={"node1": 4}), plan1.cells)
    assert plan2.keep == (JobId(1),) and bound(plan2, "vc-a") == {"node1"}
    assert plan2.report.bad_nodes == ("node1",)

    # Job 1 ends; vc-a's next job is bound to a healthy node, not the drained one.
    plan3 = p.decide_cells(snap(pending(2, 4, submit=50.0, account="team-a"), unavailable={"node1": 4}), plan2.cells)
    assert plan3.start[JobId(2)].nodes != ("node1",)
    assert bound(plan3, "vc-a") == set(plan3.start[JobId(2)].nodes)
    assert plan3.report.vcs[0].lost_gpus == 0


def test_lost_guarantee_is_reported_per_vc_not_hidden() -> None:
    p = CellsPolicy(CFG, build_policy("fifo"), bad_nodes={"node3"})
    plan = p.decide(snap(unavailable={"node1": 4, "node2": 1}))  # DRAIN node1, part of node2 taken
    assert plan.report.bad_nodes == ("node1", "node2", "node3")
    rows = {vc.name: vc for vc in plan.report.vcs}
    # One healthy node (node4) for three node-worths of quota: vc-a keeps its node (served
    # first, round-robin by VC name), vc-b loses its node and both pairs.
    assert rows["vc-a"].lost_gpus == 0
    assert rows["vc-b"].lost_gpus == 8
    assert {(q.type_name, q.lost) for q in rows["vc-b"].quota} == {("node", 1), ("gpu-pair", 2)}


def test_guaranteed_request_fails_cleanly_when_faults_ate_the_cells() -> None:
    p = CellsPolicy(CFG, build_policy("fifo"))
    all_bad = {n: 4 for n in NODES}
    plan = p.decide(snap(pending(1, 4, account="team-a"), unavailable=all_bad))
    assert plan.start == {}
    assert "VC vc-a: no free cells" in plan.reasons[JobId(1)]
    assert plan.report.vcs[0].lost_gpus == 4


def test_a_bound_cells_free_gpu_on_a_drained_node_is_lost() -> None:
    """Issue 9 item 21: a partial fault. vc-b's pair holds a 1-GPU job on node1; node1 drains:
    the pair's other GPU cannot be used, so LOST counts the pair and LOST_GPUS its free GPU."""
    p = CellsPolicy(CFG, build_policy("fifo"))
    plan1 = p.decide(snap(pending(1, 1, submit=1.0, account="team-b")))
    (node,) = plan1.start[JobId(1)].nodes
    job1 = running(1, 1, {node: 1}, submit=1.0, account="team-b")
    plan2 = p.decide_cells(snap(job1, unavailable={node: 4}), plan1.cells)
    rows = {vc.name: vc for vc in plan2.report.vcs}
    pair = next(q for q in rows["vc-b"].quota if q.type_name == "gpu-pair")
    assert (pair.bound, pair.used_gpus, pair.lost, pair.lost_gpus) == (1, 1, 1, 1)
    assert rows["vc-b"].lost_gpus == 1 and rows["vc-a"].lost_gpus == 0
