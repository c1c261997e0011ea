"""The policy contract (docs/policy-contract.md) for every policy and placement,
checked on random snapshots: pure, deterministic, total, all-or-nothing,
within capacity, every waiting job explained."""

from __future__ import annotations

import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.cells import config as cells_config
from teiresias.cells.quota import QuotaPolicy
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.base import SchedulingPolicy
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PLACEMENT_NAMES, POLICY_NAMES, PolicyParams, build_policy
from tests.conftest import REPO

DIST = ServiceDistribution.from_values([10, 40, 90, 300, 1200, 5000])
PREEMPTIVE = {"sjf", "srtf", "srsf", "las", "gittins", "themis"}


# HiveD's cells and the quota baseline run on the example VCs (etc/cells.example.yaml:
# vc-a for team-a, vc-b for team-b; any other account is opportunistic).
CELLS_CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=["node1", "node2", "node3", "node4"])
CELLS_CFG = cells_config.load(REPO / "etc" / "cells.example.yaml", cluster=CELLS_CLUSTER)


def random_snapshot(rng: random.Random, cluster: Cluster | None = None, accounts: tuple[str, ...] = ("",)) -> Snapshot:
    """A valid snapshot: running jobs sit on GPUs that exist and are not unavailable.
    ``cluster``: a fixed cluster instead of a random one; each job's account is drawn from ``accounts``."""
    gpus = rng.choice([1, 2, 4, 8])
    c = cluster or Cluster.from_tiresias_spec(rng.randint(1, 2), rng.randint(1, 3), gpus)
    gpus = c.max_gpus_per_node
    unavailable = {n.name: rng.randint(0, 1) for n in c.nodes if rng.random() < 0.2}
    left = {n.name: n.gpus - unavailable.get(n.name, 0) for n in c.nodes}
    jobs: list[Job] = []
    for i in range(rng.randint(0, 12)):
        need = rng.choice([1, 1, 2, 3, 4, 8, 16])
        executed = rng.choice([0.0, 0.0, 5.0, 50.0, 400.0])
        kw = dict(
            submit_time=float(rng.randint(0, 20)),
            executed_time=executed,
            total_executed_time=executed,
            waiting_time=float(rng.choice([0, 10, 1000])),
            duration=float(rng.randint(1, 600)) + executed,
            skew=rng.choice([None, 0.1, 0.9]),
            account=rng.choice(accounts),
            shareable=rng.random() < 0.8,  # live: a shard job; the others hold whole GPUs
        )
        if rng.random() < 0.5:
            # Try to make it RUNNING somewhere it fits.
            take: dict[str, int] = {}
            want = need
            for name in rng.sample(list(left), len(left)):
                g = min(left[name], want)
                if g > 0:
                    take[name] = g
                    want -= g
                if want == 0:
                    break
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
        started = rng.random() < 0.3
        jobs.append(Job(JobId(i), need, first_start_time=kw["submit_time"] if started else None, **kw))
    rng.shuffle(jobs)
    if rng.random() < 0.2:
        # A node drains under its running jobs: all its GPUs become unavailable.
        unavailable[rng.choice(c.nodes).name] = gpus
    return Snapshot(float(rng.randint(20, 40)), c, jobs, unavailable)


def check_contract(name: str, placement: str, continuous: bool, snap: Snapshot) -> None:
    params = PolicyParams(
        queues=(100.0, 1000.0), promote_knob=2.0, distribution=DIST, placement=placement, continuous=continuous
    )
    check_plan(build_policy(name, params), snap, preemptive=name in PREEMPTIVE)


def check_plan(policy: SchedulingPolicy, snap: Snapshot, preemptive: bool, minimal_preemption: bool = True) -> None:
    """docs/policy-contract.md's rules on one decision of ``policy``; with
    ``minimal_preemption`` also that no job is preempted whose GPUs the plan does not need."""
    before = copy.deepcopy(snap)
    plan = policy.decide(snap)
    assert snap == before, "policy mutated its snapshot"
    assert policy.decide(snap) == plan, "same snapshot, different plan"

    ids = [j.job_id for j in snap.jobs]
    by_id = {j.job_id: j for j in snap.jobs}
    assert sorted(plan.order) == sorted(ids) and len(plan.order) == len(ids)
    assert set(plan.queues) == set(ids)
    running = {j.job_id for j in snap.jobs if j.is_running}
    assert not set(plan.keep) & set(plan.preempt)
    assert set(plan.keep) | set(plan.preempt) == running
    assert len(plan.keep) + len(plan.preempt) == len(running)
    assert all(not by_id[j].is_running for j in plan.start)
    if not preemptive:
        assert plan.preempt == ()

    # All-or-nothing, on GPUs that are free once the preemptions are done;
    # unavailable GPUs are never handed out (kept jobs may sit on a drained node).
    kept = {n.name: 0 for n in snap.cluster.nodes}
    started = {n.name: 0 for n in snap.cluster.nodes}
    kept_ids = set(plan.keep)
    pooled: dict[str, set[int]] = {}
    for jid in plan.keep:
        job = by_id[jid]
        if job.bound_gpus and job.num_gpus == 1:
            # A 1-GPU job bound by GPU index (gandiva's pools): the node's pool holds the GPUs
            # its bound-to-one jobs are bound to and those its others run on.
            node = job.placement.nodes[0]
            if len(job.bound_gpus) == 1:
                pooled.setdefault(node, set()).add(job.bound_gpus[0])
            elif not job.suspended:
                pooled.setdefault(node, set()).update(job.placement.allocations[0].gpu_ids)
            continue
        if any(p < jid and p in kept_ids for p in job.colocated_with):
            continue  # a colocated group (gandiva) holds its GPUs once
        for a in job.placement.allocations:
            kept[a.node] += a.gpus
    for node, ids in pooled.items():
        kept[node] += len(ids)
    for jid, pl in plan.devices.items():
        job = by_id[jid]
        assert jid in plan.keep and len(job.bound_gpus) > 1 and pl.nodes == job.placement.nodes
        assert len(pl.allocations[0].gpu_ids) == 1 and pl.allocations[0].gpu_ids[0] in job.bound_gpus
    partners = [sh.partner for sh in plan.sharing.values()]
    assert len(set(partners)) == len(partners), "a GPU holds at most two jobs"
    for jid, pl in plan.start.items():
        assert pl.num_gpus == by_id[jid].num_gpus
        assert len(set(pl.nodes)) == len(pl.nodes)
        if jid in plan.colocate:
            # A time-sliced start (gandiva) sits on exactly the GPUs its kept partners hold.
            col = plan.colocate[jid]
            partners = col.partners
            assert partners and all(p in plan.keep for p in partners)
            assert by_id[jid].shareable and all(by_id[p].shareable for p in partners), "a whole-GPU job shares"
            if col.gpus:
                # A 1-GPU job joining a node's time-sliced jobs: on that node, on one of the
                # GPUs it is bound to (Colocation.gpus), among GPUs the node has.
                assert all(by_id[p].placement.nodes == pl.nodes for p in partners) and pl.num_nodes == 1
                assert len(pl.allocations[0].gpu_ids) == 1 and pl.allocations[0].gpu_ids[0] in col.gpus
                assert set(col.gpus) <= set(range(snap.cluster.node(pl.nodes[0]).gpus))
                continue
            assert all(by_id[p].placement == pl for p in partners)
            continue
        if jid in plan.sharing:
            # A shared start (sjf-bsbf, sjf-ffs) sits on GPUs of one kept job that shared with nobody.
            host = by_id[plan.sharing[jid].partner]
            assert host.job_id in plan.keep and host.shared_with is None
            assert by_id[jid].shareable and host.shareable, "a whole-GPU job shares"
            on = {a.node: a.gpus for a in host.placement.allocations}
            assert all(0 < a.gpus <= on.get(a.node, 0) for a in pl.allocations)
            continue
        for a in pl.allocations:
            assert a.node in snap.cluster and a.gpus > 0
            started[a.node] += a.gpus
    # Gandiva's decisions (policy-contract rule 6): pauses and moves of kept jobs only;
    # migration and grow targets on GPUs idle before the plan and not taken by its starts.
    assert set(plan.suspend) | set(plan.resume) | set(plan.pack) | set(plan.unpack) <= set(plan.keep)
    assert not set(plan.suspend) & set(plan.resume) and not set(plan.pack) & set(plan.unpack)
    assert all(by_id[j].suspended for j in plan.resume) and not any(by_id[j].suspended for j in plan.suspend)
    for jid, pl in plan.migrate.items():
        assert jid in plan.keep and pl.num_gpus == by_id[jid].num_gpus and jid not in plan.resize
    for jid, pl in plan.resize.items():
        job = by_id[jid]
        assert jid in plan.keep and job.elastic is not None and job.elastic[0] <= pl.num_gpus <= job.elastic[1]
    for jid, pl in list(plan.migrate.items()) + list(plan.resize.items()):
        old = {a.node: a.gpus for a in by_id[jid].placement.allocations} if jid in plan.resize else {}
        for a in pl.allocations:
            # A grow keeps its own GPUs; anything more comes out of the idle ones.
            started[a.node] += max(a.gpus - old.get(a.node, 0), 0)
    usable = {n.name: n.gpus - snap.unavailable.get(n.name, 0) for n in snap.cluster.nodes}
    for n in snap.cluster.nodes:
        assert started[n.name] <= max(usable[n.name] - kept[n.name], 0), f"node {n.name} over-committed"
    # No needless preemption: a preempted job could not have stayed beside the
    # kept and started jobs (some node of its would be over-committed).
    for jid in plan.preempt if minimal_preemption else ():
        allocs = by_id[jid].placement.allocations
        assert any(kept[a.node] + started[a.node] + a.gpus > usable[a.node] for a in allocs), (
            f"job {jid} preempted although its GPUs were not needed"
        )

    for j in snap.jobs:
        waiting = (not j.is_running and j.job_id not in plan.start) or j.job_id in plan.preempt
        if waiting:
            assert plan.reasons.get(j.job_id), f"job {j.job_id} waits without a reason"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rng=st.randoms(use_true_random=False),
    name=st.sampled_from(POLICY_NAMES),
    placement=st.sampled_from(PLACEMENT_NAMES),
    continuous=st.booleans(),
)
def test_every_policy_keeps_the_contract(rng, name, placement, continuous) -> None:
    check_contract(name, placement, continuous, random_snapshot(rng))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rng=st.randoms(use_true_random=False),
    kind=st.sampled_from(["cells", "quota"]),
    ranker=st.sampled_from(["las", "gittins", "fifo"]),
)
def test_the_cells_and_quota_policies_keep_the_contract(rng, kind, ranker) -> None:
    """HiveD's cells (HiveD §3) and the quota baseline under a Tiresias ranker,
    with guaranteed (team-a, team-b) and opportunistic jobs on the example VCs."""
    inner = build_policy(ranker, PolicyParams(queues=(100.0, 1000.0), promote_knob=2.0, distribution=DIST))
    policy = CellsPolicy(CELLS_CFG, inner) if kind == "cells" else QuotaPolicy(CELLS_CFG, inner)
    # Not minimal_preemption: a guaranteed job takes its VC's bound cell back from the
    # opportunistic jobs in it even when the node has idle GPUs of other cells (HiveD §3.2).
    check_plan(
        policy,
        random_snapshot(rng, CELLS_CLUSTER, ("team-a", "team-b", "guest")),
        preemptive=True,
        minimal_preemption=False,
    )


@settings(max_examples=60, deadline=None)
@given(
    rng=st.randoms(use_true_random=False),
    name=st.sampled_from([n for n in POLICY_NAMES if n != "fifo"]),
    placement=st.sampled_from(PLACEMENT_NAMES),
)
def test_no_waiting_job_could_use_the_gpus_left_idle(rng, name, placement) -> None:
    """Skipping is only for jobs that truly cannot be placed on what is left
    (fifo excepted: its head-of-line blocking leaves GPUs idle on purpose)."""
    snap = random_snapshot(rng)
    policy = build_policy(
        name, PolicyParams(queues=(100.0, 1000.0), promote_knob=2.0, distribution=DIST, placement=placement)
    )
    plan = policy.decide(snap)
    by_id = {j.job_id: j for j in snap.jobs}
    left = {n.name: n.gpus - snap.unavailable.get(n.name, 0) for n in snap.cluster.nodes}
    for jid in plan.keep:
        for a in by_id[jid].placement.allocations:
            left[a.node] -= a.gpus
    for pl in plan.start.values():
        for a in pl.allocations:
            left[a.node] -= a.gpus
    left = {k: max(v, 0) for k, v in left.items()}
    for j in snap.jobs:
        if not j.is_running and j.job_id not in plan.start and j.num_gpus > 0:
            assert policy.placement.place(j, left, snap.cluster) is None, f"job {j.job_id} could have started"


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_empty_snapshot_gives_empty_plan(name) -> None:
    c = Cluster.from_tiresias_spec(1, 1, 4)
    plan = build_policy(name, PolicyParams(distribution=DIST)).decide(Snapshot(0.0, c, []))
    assert plan.is_empty and plan.order == () and plan.keep == ()
