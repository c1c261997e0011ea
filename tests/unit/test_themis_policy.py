"""The Themis round (docs/themis.md): leases, filtering, auction winners, leftovers, determinism."""

from __future__ import annotations

import pytest

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.registry import POLICY_NAMES, PolicyParams, build_policy
from teiresias.policy.themis.policy import ThemisPolicy
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.trace import TraceJob

C = Cluster.from_tiresias_spec(1, 1, 4)


def _running(jid: int, app: str, gpus: int, lease_end: float | None, executed: float = 100.0) -> Job:
    return Job(
        JobId(jid),
        gpus,
        0.0,
        app=app,
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": gpus}),
        first_start_time=0.0,
        executed_time=executed,
        total_executed_time=executed,
        duration=executed + 1000.0,
        lease_end=lease_end,
    )


def _pending(jid: int, app: str, gpus: int, submit: float = 0.0) -> Job:
    return Job(JobId(jid), gpus, submit, app=app, duration=500.0)


def test_themis_is_registered_with_its_knobs():
    assert "themis" in POLICY_NAMES
    pol = build_policy("themis", PolicyParams(lease=20.0, fairness_knob=0.5, seed=3))
    assert (pol.name, pol.lease, pol.fairness_knob, pol.seed) == ("themis", 20.0, 0.5, 3)
    with pytest.raises(ConfigError, match="lease"):
        PolicyParams(lease=0.0)
    with pytest.raises(ConfigError, match="fairness knob"):
        PolicyParams(fairness_knob=1.0)


def test_a_job_keeps_its_gpus_until_its_lease_ends():
    pol = build_policy("themis")
    jobs = [_running(1, "a", 4, lease_end=200.0), _pending(2, "b", 4)]
    plan = pol.decide(Snapshot(100.0, C, jobs))
    assert plan.keep == (JobId(1),) and not plan.start and not plan.preempt
    assert plan.leases == {JobId(1): 200.0}
    assert plan.reasons[JobId(2)]


def test_at_lease_end_the_gpus_go_to_the_app_farthest_from_fair():
    pol = build_policy("themis", PolicyParams(lease=600.0))
    jobs = [_running(1, "a", 4, lease_end=100.0), _pending(2, "b", 4)]
    plan = pol.decide(Snapshot(100.0, C, jobs))
    # b has waited with no GPUs: its rho is the highest, it is the one app (1 - f of 2) that bids.
    assert plan.rho[JobId(2)] > plan.rho[JobId(1)]
    assert plan.preempt == (JobId(1),) and set(plan.start) == {JobId(2)}
    assert plan.leases == {JobId(2): 700.0}
    assert "preempted" in plan.reasons[JobId(1)]


def test_with_nothing_pending_every_ended_lease_is_renewed():
    pol = build_policy("themis", PolicyParams(lease=600.0))
    jobs = [_running(1, "a", 2, lease_end=50.0), _running(2, "b", 2, lease_end=None)]
    plan = pol.decide(Snapshot(100.0, C, jobs))
    assert set(plan.keep) == {JobId(1), JobId(2)} and not plan.preempt
    assert plan.leases == {JobId(1): 700.0, JobId(2): 700.0}


def test_idle_gpus_never_stay_idle_while_a_job_fits():
    # Only app a bids (1 - f of 5 apps rounds up to 1), and wins 1 GPU; the leftover 3 GPUs go to the
    # other apps' jobs, in a seeded random order of apps.
    jobs = [_pending(i, f"app{i}", 1, submit=float(i)) for i in range(5)]
    plan = build_policy("themis").decide(Snapshot(0.0, C, jobs))
    assert len(plan.start) == 4


def test_leftover_order_is_seeded():
    jobs = [_pending(i, f"app{i}", 1) for i in range(12)]
    snap = Snapshot(0.0, C, jobs)
    a = build_policy("themis", PolicyParams(seed=1)).decide(snap)
    assert a == build_policy("themis", PolicyParams(seed=1)).decide(snap)
    starts = {frozenset(build_policy("themis", PolicyParams(seed=s)).decide(snap).start) for s in range(8)}
    assert len(starts) > 1, "the seed must pick the leftover order"


def test_within_an_app_its_jobs_go_in_2d_las_order():
    # App a wins 2 GPUs worth of its jobs; the one with less attained service comes first.
    older = Job(
        JobId(1),
        2,
        0.0,
        app="a",
        first_start_time=0.0,
        executed_time=5000.0,
        total_executed_time=5000.0,
        duration=9000.0,
    )
    newer = Job(JobId(2), 2, 1.0, app="a", duration=100.0)
    plan = build_policy("themis").decide(Snapshot(10.0, Cluster.from_tiresias_spec(1, 1, 2), [older, newer]))
    assert set(plan.start) == {JobId(2)}


def test_while_a_filtered_app_cannot_bid_new_leases_end_with_the_next_lease():
    # 4 GPUs. a's job 1 (1 GPU) lease ended; a's job 2 (1 GPU) leased until 400; 2 GPUs idle. b waits
    # with one 4-GPU job: it is the app that bids, but only 3 GPUs are on auction. a's job 1 and a's
    # waiting job 3 run on as leftovers, their leases ending with job 2's so that all 4 GPUs are on
    # auction at 400.
    jobs = [
        _running(1, "a", 1, lease_end=100.0),
        _running(2, "a", 1, lease_end=400.0),
        _pending(3, "a", 1),
        _pending(4, "b", 4),
    ]
    plan = build_policy("themis", PolicyParams(lease=600.0)).decide(Snapshot(100.0, C, jobs))
    assert set(plan.start) == {JobId(3)} and JobId(1) in plan.keep
    assert plan.leases == {JobId(1): 400.0, JobId(2): 400.0, JobId(3): 400.0}


def test_an_app_needing_more_gpus_than_one_lease_frees_gets_them():
    """8 GPUs, one node. App s starts eight 1-GPU jobs a minute apart; at 500 s app b submits one
    8-GPU job. b is the one app that bids (1 - f of 2), but its only level is 8 GPUs: with leases
    of now + 600 s they end one job at a time, b never has 8 GPUs on auction, and each freed GPU
    went back to s under a fresh lease until s's jobs ended (~20,000 s). With the new leases ending
    with the next one while b cannot bid, the GPUs gather and b wins all 8 by 1,020 s."""
    trace = [TraceJob(k, 1, 60.0 * k, 20_000.0, model_name="m", app="s") for k in range(8)]
    trace.append(TraceJob(8, 8, 500.0, 600.0, model_name="m", app="b"))
    cluster = Cluster.from_tiresias_spec(1, 1, 8)
    res = Simulator(
        trace,
        cluster,
        ThemisPolicy(ConsolidatePlacement(), lease=600.0),
        SimulationOptions(record_timeline=False, progress=False),
    ).run()
    b = next(r for r in res.records if r.job_id == 8)
    assert b.start <= 1200.0 + 60.0, f"b's 8-GPU job waited until {b.start:.0f} s"
