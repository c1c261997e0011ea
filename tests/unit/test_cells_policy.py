"""CellsPolicy: HiveD cells under Tiresias ordering, on the demo cluster's config (4 nodes x 4 GPUs)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.cells import config
from teiresias.cells.scheduler import CellsPolicy
from teiresias.cells.state import CellsState
from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import pending, running

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml"
NODES = ["node1", "node2", "node3", "node4"]
CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=NODES)
CFG = config.load(EXAMPLE, cluster=CLUSTER)  # vc-a: 1 node (team-a); vc-b: 1 node + 2 pairs (team-b)


def policy(name: str = "las") -> CellsPolicy:
    return CellsPolicy(CFG, build_policy(name, PolicyParams(queues=(3600.0,))))


def snap(*jobs: Job, now: float = 1000.0, unavailable: dict[str, int] | None = None) -> Snapshot:
    return Snapshot(now, CLUSTER, list(jobs), dict(unavailable or {}))


def test_guaranteed_job_gets_a_whole_node_preempting_the_fewest_opportunistic_jobs() -> None:
    # Opportunistic jobs of an account in no VC are spread over every node.
    spread = {"node1": [1, 1, 1], "node2": [1, 1], "node3": [2], "node4": [1, 1]}
    jobs, k = [], 100
    for node, sizes in spread.items():
        for g in sizes:
            jobs.append(running(k, g, {node: g}, submit=float(k), account="guest"))
            k += 1
    jobs.append(pending(1, 4, submit=500.0, account="team-a"))
    plan = policy().decide(snap(*jobs))
    assert plan.start == {JobId(1): Placement.of({"node3": 4})}
    assert plan.preempt == (JobId(105),)  # the one 2-GPU job on node3: one preemption
    assert "guaranteed job 1 of VC vc-a" in plan.reasons[JobId(105)]
    assert JobId(1) in plan.guaranteed
    vc_a = plan.report.vcs[0]
    assert (vc_a.name, vc_a.guaranteed_jobs, vc_a.quota[0].bound) == ("vc-a", (JobId(1),), 1)


def test_choice_inside_a_node_avoids_opportunistic_gpus() -> None:
    # vc-b's bound node1: its guaranteed 2-GPU job holds pair 0, a guest holds one GPU of
    # pair 1. The VC's next 1-GPU job takes the other GPU of pair 1: no preemption.
    full = [running(10 + i, 4, {n: 4}, submit=0.5, account="guest") for i, n in enumerate(NODES[1:])]
    jobs = [
        running(1, 2, {"node1": 2}, submit=1.0, account="team-b"),
        running(2, 1, {"node1": 1}, submit=2.0, account="guest"),
        *full,
        pending(5, 1, submit=5.0, account="team-b"),
    ]
    plan = policy().decide(snap(*jobs))
    assert plan.start == {JobId(5): Placement.of({"node1": 1})}
    assert plan.preempt == ()
    cells = {j.job_id: j.cells for j in plan.cells.jobs}
    assert cells[JobId(1)] == ("node1/0",) and cells[JobId(2)] == ("node1/1/0",)
    assert cells[JobId(5)] == ("node1/1/1",)


def test_opportunistic_beyond_quota_then_displaced_by_a_guaranteed_job() -> None:
    p = policy("fifo")
    # Two 4-GPU jobs of vc-a (quota: one node): the second runs opportunistically.
    s1 = snap(pending(1, 4, submit=1.0, account="team-a"), pending(2, 4, submit=2.0, account="team-a"))
    plan1 = p.decide(s1)
    assert set(plan1.start) == {JobId(1), JobId(2)}
    assert plan1.guaranteed == frozenset({JobId(1)})
    # Later vc-b needs all its quota (a node and two pairs): it gets the free nodes and then
    # preempts vc-a's opportunistic job, never vc-a's guaranteed one.
    placed = {j: plan1.start[j] for j in plan1.start}
    jobs = [
        running(int(j), 4, {a.node: a.gpus for a in pl.allocations}, submit=float(j), account="team-a")
        for j, pl in placed.items()
    ]
    jobs += [
        pending(10, 4, submit=10.0, account="team-b"),
        pending(11, 2, submit=11.0, account="team-b"),
        pending(12, 2, submit=12.0, account="team-b"),
    ]
    plan2 = p.decide_cells(snap(*jobs), plan1.cells)
    assert set(plan2.start) == {JobId(10), JobId(11), JobId(12)}
    assert plan2.preempt == (JobId(2),)
    assert JobId(1) in plan2.keep
    nodes_b = {a.node for j in (10, 11, 12) for a in plan2.start[JobId(j)].allocations}
    assert placed[JobId(1)].nodes[0] not in nodes_b


def test_las_order_inside_a_vc_evicts_the_lower_priority_guaranteed_job() -> None:
    # vc-a's quota is one node. A long-running job (Q2 by attained service) holds it; a new
    # job of the same VC (Q1) takes it back: Tiresias' preemption, inside the VC.
    old = running(1, 4, {"node1": 4}, submit=0.0, account="team-a", executed_time=5000.0, total_executed_time=5000.0)
    filler = [running(10 + i, 4, {n: 4}, submit=1.0, account="guest") for i, n in enumerate(NODES[1:])]
    new = pending(2, 4, submit=900.0, account="team-a")
    plan = policy("las").decide(snap(old, *filler, new))
    assert JobId(2) in plan.start and JobId(1) in plan.preempt
    assert "higher-priority job 2" in plan.reasons[JobId(1)]
    assert plan.start[JobId(2)] == Placement.of({"node1": 4})
    assert set(plan.keep) == {JobId(10), JobId(11), JobId(12)}


def test_binding_state_round_trips_through_json_and_is_kept() -> None:
    p = policy()
    plan1 = p.decide(snap(pending(1, 1, submit=1.0, account="team-b"), pending(2, 3, submit=2.0, account="team-a")))
    state = CellsState.from_json(json.loads(json.dumps(plan1.cells.to_json())))
    assert state == plan1.cells
    jobs = [
        running(int(j), pl.num_gpus, {a.node: a.gpus for a in pl.allocations}, account=acct)
        for (j, pl), acct in zip(sorted(plan1.start.items()), ["team-b", "team-a"])
    ]
    plan2 = p.decide_cells(snap(*jobs), state)
    assert plan2.cells == plan1.cells  # nothing changed, nothing moved
    assert plan2.keep and not plan2.preempt


def test_pure_and_deterministic() -> None:
    s = snap(
        running(1, 2, {"node2": 2}, account="team-b"),
        pending(2, 4, account="team-a"),
        pending(3, 8, account="team-b"),
        pending(4, 16, account="guest"),
    )
    before = copy.deepcopy(s)
    p = policy()
    plan = p.decide(s)
    assert s == before
    assert p.decide(s) == plan
    assert "16 as an opportunistic job" in plan.reasons[JobId(4)]


def random_snapshot(rng: random.Random) -> Snapshot:
    unavailable = {n: 4 for n in NODES if rng.random() < 0.15}
    left = {n: 4 - unavailable.get(n, 0) for n in NODES}
    jobs: list[Job] = []
    for i in range(rng.randint(0, 12)):
        need = rng.choice([1, 1, 2, 3, 4, 4, 8])
        acct = rng.choice(["team-a", "team-b", "team-b-students", "guest"])
        executed = rng.choice([0.0, 100.0, 5000.0])
        kw = dict(
            submit_time=float(rng.randint(0, 20)), account=acct, executed_time=executed, total_executed_time=executed
        )
        if rng.random() < 0.5:
            take: dict[str, int] = {}
            want = need
            for name in rng.sample(NODES, 4):
                g = min(left[name], want)
                if g > 0:
                    take[name] = g
                    want -= g
            if want == 0:
                for name, g in take.items():
                    left[name] -= g
                jobs.append(
                    Job(
                        JobId(i),
                        need,
                        state=JobState.RUNNING,
                        placement=Placement.of(take),
                        first_start_time=kw["submit_time"],
                        **kw,
                    )
                )
                continue
        jobs.append(Job(JobId(i), need, **kw))
    return Snapshot(30.0, CLUSTER, jobs, unavailable)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False), name=st.sampled_from(["las", "fifo", "gittins-free"]))
def test_policy_contract_and_quotas_on_random_snapshots(rng, name) -> None:
    s = random_snapshot(rng)
    p = policy("las" if name == "gittins-free" else name)
    plan = p.decide(s)
    by_id = {j.job_id: j for j in s.jobs}
    running_ids = {j.job_id for j in s.jobs if j.is_running}
    assert sorted(plan.order) == sorted(by_id) and set(plan.queues) == set(by_id)
    assert not set(plan.keep) & set(plan.preempt) and set(plan.keep) | set(plan.preempt) == running_ids
    used = {n: 0 for n in NODES}
    for jid in plan.keep:
        for a in by_id[jid].placement.allocations:
            used[a.node] += a.gpus
    for jid, pl in plan.start.items():
        assert not by_id[jid].is_running and pl.num_gpus == by_id[jid].num_gpus
        for a in pl.allocations:
            assert a.node not in s.unavailable, "started on a DOWN/DRAIN node"
            used[a.node] += a.gpus
    assert all(used[n] <= 4 for n in NODES), used
    # Guaranteed GPUs of a VC never exceed its quota, and the plan's state lists exactly the live jobs.
    live = set(plan.keep) | set(plan.start)
    assert {j.job_id for j in plan.cells.jobs} <= live
    for vc in plan.report.vcs:
        assert vc.guaranteed_gpus <= vc.quota_gpus
    for j in s.jobs:
        if (not j.is_running and j.job_id not in plan.start) or j.job_id in plan.preempt:
            assert plan.reasons.get(j.job_id)
