"""CellsPolicy over many rounds: in the real simulator, and with the stored binding fed back."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.cells import config
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import Cluster, Job, JobId, JobState, Snapshot
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, TraceJob, run

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml"
NODES = ["node1", "node2", "node3", "node4"]
CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=NODES)
CFG = config.load(EXAMPLE, cluster=CLUSTER)
TOPO = CFG.topology()


def leaves(addresses) -> list[str]:
    return [leaf.address for a in addresses for leaf in TOPO.by_address[a].leaves()]


ACCOUNTS = ["team-a", "team-b", "team-b-students", "guest"]


def test_simulator_replays_a_multi_tenant_trace_to_the_end() -> None:
    rng = random.Random(3)
    trace, t = [], 0.0
    for i in range(80):
        t += rng.expovariate(1 / 120)
        trace.append(
            TraceJob(
                i + 1, rng.choice([1, 1, 2, 4, 4, 8]), round(t, 1), rng.uniform(200, 3000), account=rng.choice(ACCOUNTS)
            )
        )
    policy = CellsPolicy(CFG, build_policy("las", PolicyParams(queues=(2000.0,))), with_report=False)
    res = run(trace, CLUSTER, policy, SimulationOptions(interval=60.0, progress=False))
    # The engine rejects any plan that starts a job on GPUs that are not free; all jobs finish.
    assert len(res.records) == len(trace)
    assert res.summary.preemptions > 0  # guaranteed jobs did displace opportunistic ones


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["las", "fifo"]))
def test_rounds_with_the_stored_binding_keep_every_invariant(seed: int, name: str) -> None:
    rng = random.Random(seed)
    policy = CellsPolicy(CFG, build_policy(name, PolicyParams(queues=(500.0,))))
    jobs: dict[JobId, Job] = {}
    state = None
    next_id = 1
    for rnd in range(12):
        now = rnd * 100.0
        for _ in range(rng.randint(0, 4)):
            jid = JobId(next_id)
            next_id += 1
            jobs[jid] = Job(jid, rng.choice([1, 2, 3, 4, 8]), now, account=rng.choice(ACCOUNTS))
        for j in list(jobs.values()):  # some running jobs finish
            if j.is_running and rng.random() < 0.2:
                del jobs[j.job_id]
        drained = {n: 4 for n in NODES if rng.random() < 0.1}
        snap = Snapshot(now, CLUSTER, list(jobs.values()), drained)
        plan = policy.decide_cells(snap, state)
        state = plan.cells
        for jid in plan.preempt:
            j = jobs[jid]
            jobs[jid] = Job(jid, j.num_gpus, j.submit_time, account=j.account, executed_time=j.executed_time)
        for jid, pl in plan.start.items():
            j = jobs[jid]
            jobs[jid] = Job(
                jid,
                j.num_gpus,
                j.submit_time,
                account=j.account,
                state=JobState.RUNNING,
                placement=pl,
                first_start_time=now,
                executed_time=j.executed_time,
            )
        for j in jobs.values():
            if j.is_running:
                j.executed_time += 100.0
        # Invariants after every round.
        used = {n: 0 for n in NODES}
        for j in jobs.values():
            if j.is_running:
                for a in j.placement.allocations:
                    used[a.node] += a.gpus
        assert all(used[n] <= 4 for n in NODES), used
        live = {j.job_id for j in jobs.values() if j.is_running}
        assert {jc.job_id for jc in state.jobs} == live
        held = leaves(c for jc in state.jobs for c in jc.cells)
        assert len(held) == len(set(held)), "a GPU held twice"
        for jc in state.jobs:  # the cells a job holds are exactly its placement
            assert len(leaves(jc.cells)) == jobs[jc.job_id].num_gpus
        for vc in plan.report.vcs:
            assert vc.guaranteed_gpus <= vc.quota_gpus
        bound = leaves(b.cell for b in state.bindings)
        assert len(bound) == len(set(bound)), "physical cells bound to two virtual cells overlap"
        for jc in state.jobs:  # a guaranteed job's cells lie inside its VC's bound cells
            if jc.guaranteed:
                mine = set(leaves(b.cell for b in state.bindings if b.vc == jc.vc))
                assert set(leaves(jc.cells)) <= mine
