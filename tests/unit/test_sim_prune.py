"""Pruned rounds and skipped quiet ticks change no result.

With ``SimulationOptions.prune_rounds`` the engine hands an ``idle_first``
policy only the pending jobs, the running jobs' GPUs as ``unavailable``, and
keeps that plan only when every pending job started (or the policy never
preempts). With ``skip_quiet_ticks`` it skips the ticks before a policy's
``quiet_until`` after a round that changed nothing. Every job record,
preemption count and overhead must equal those of the replay where every
round sees every job and every tick runs.
"""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import POLICY_NAMES, PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator, TraceJob

jobs_st = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 3, 4, 8]), st.integers(0, 600), st.integers(1, 900)),
    min_size=1,
    max_size=30,
)


def replay(trace, cluster, params, name, opt):
    sim = Simulator(trace, cluster, build_policy(name, params), opt)
    return sim, sim.run()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=jobs_st,
    name=st.sampled_from(POLICY_NAMES),
    placement=st.sampled_from(["consolidate", "spread", "profile"]),
    overhead=st.sampled_from([0.0, 7.0]),
    interval=st.sampled_from([0.0, 10.0, 60.0]),
    continuous=st.booleans(),
    promote=st.sampled_from([None, 1.0]),
)
def test_pruned_replay_equals_full_replay(rows, name, placement, overhead, interval, continuous, promote):
    cluster = Cluster.from_tiresias_spec(2, 2, 4)
    trace = [TraceJob(i, g, float(s), float(d), "vgg16" if i % 2 else "resnet50") for i, (g, s, d) in enumerate(rows)]
    params = PolicyParams(
        queues=(100.0,),
        placement=placement,
        continuous=continuous,
        promote_knob=promote,
        distribution=ServiceDistribution([50, 200, 800, 2000]),
    )
    opt = SimulationOptions(interval=interval, preempt_overhead=overhead, progress=False)
    _, full = replay(trace, cluster, params, name, replace(opt, prune_rounds=False, skip_quiet_ticks=False))
    _, fast = replay(trace, cluster, params, name, opt)
    assert fast.records == full.records
    assert fast.summary.preemptions == full.summary.preemptions
    assert fast.summary.rounds <= full.summary.rounds
    _, pruned = replay(trace, cluster, params, name, replace(opt, skip_quiet_ticks=False))
    assert pruned.records == full.records and pruned.summary.rounds == full.summary.rounds


def test_quiet_ticks_are_skipped_up_to_the_demotion_tick():
    """las, one GPU: J1 runs and is demoted at 100 GPU-s; J2 waits. Without skipping, a
    tick every 10 s; with it, the ticks before the demotion plan nothing and are skipped,
    the tick at the demotion preempts J1 for J2 as before."""
    cluster = Cluster.from_tiresias_spec(1, 1, 1)
    trace = [TraceJob(1, 1, 0.0, 300.0), TraceJob(2, 1, 5.0, 50.0)]
    params = PolicyParams(queues=(100.0,))
    opt = SimulationOptions(interval=10.0, progress=False)
    _, full = replay(trace, cluster, params, "las", replace(opt, skip_quiet_ticks=False))
    _, fast = replay(trace, cluster, params, "las", opt)
    assert fast.records == full.records
    assert {r.job_id: r.end for r in fast.records} == {2: 150.0, 1: 350.0}
    # Full: arrivals 0, 5; ticks 10..100 (J2 waits), 110..140 (J1 waits); completion 150 = 17.
    # Skipping: 0, 5 (J2 arrives, plans nothing: quiet until J1's demotion at 100), 100 (preempts
    # J1), 110 (nothing: quiet until J2's demotion at 200), 150 (J2 completes, J1 resumes) = 5.
    assert full.summary.rounds == 17 and fast.summary.rounds == 5


def test_pruning_happens_and_falls_back_under_contention():
    """Arrivals that fit are pruned rounds; a Q1 arrival that must preempt takes the full round.
    (With kept rounds, las takes those instead of pruned ones: here they are off.)"""
    cluster = Cluster.from_tiresias_spec(1, 1, 4)
    # Job 0 fills the node and is demoted after 100 GPU-s; jobs 1-2 arrive while it runs.
    trace = [TraceJob(0, 2, 0.0, 500.0), TraceJob(1, 2, 10.0, 50.0), TraceJob(2, 4, 200.0, 50.0)]
    params = PolicyParams(queues=(100.0,))
    opt = SimulationOptions(interval=60.0, progress=False, keyed_rounds=False)
    sim, res = replay(trace, cluster, params, "las", opt)
    _, full = replay(trace, cluster, params, "las", replace(opt, prune_rounds=False))
    assert res.records == full.records and res.summary.preemptions == full.summary.preemptions > 0
    assert 0 < sim.pruned_rounds < res.summary.rounds
    kept, res = replay(trace, cluster, params, "las", replace(opt, keyed_rounds=True))
    assert res.records == full.records and kept.pruned_rounds == 0 and kept.keyed_rounds > 0


def test_policy_without_the_mark_sees_every_job():
    class Wrapped:
        def __init__(self, inner):
            self.inner, self.name, self.sizes = inner, inner.name, []

        def decide(self, snapshot):
            self.sizes.append(len(snapshot.jobs))
            return self.inner.decide(snapshot)

    cluster = Cluster.from_tiresias_spec(1, 1, 4)
    pol = Wrapped(build_policy("las"))
    sim = Simulator(
        [TraceJob(0, 1, 0.0, 100.0), TraceJob(1, 1, 10.0, 100.0)], cluster, pol, SimulationOptions(progress=False)
    )
    sim.run()
    assert sim.pruned_rounds == 0 and pol.sizes == [1, 2]


def test_an_arrival_after_a_demotion_takes_the_full_round():
    """No ticks (interval 0). J2 (2 GPUs) waits behind J1, which runs on 1 of 2 GPUs: an empty
    round at t=1. J1 is demoted at t=100, so J2 now outranks it; J3 arrives at 150 and fits
    the idle GPU, but the round must see J2 evict J1 first (the newcomers-only shortcut is
    valid only before the base jobs' ranking can move)."""
    cluster = Cluster.from_tiresias_spec(1, 1, 2)
    trace = [TraceJob(1, 1, 0.0, 1000.0), TraceJob(2, 2, 1.0, 50.0), TraceJob(3, 1, 150.0, 10.0)]
    params = PolicyParams(queues=(100.0,))
    opt = SimulationOptions(interval=0.0, progress=False)
    _, full = replay(trace, cluster, params, "las", replace(opt, prune_rounds=False, skip_quiet_ticks=False))
    _, fast = replay(trace, cluster, params, "las", opt)
    assert fast.records == full.records
    by_id = {r.job_id: r for r in fast.records}
    assert by_id[2].start == 150.0 and by_id[2].end == 200.0 and by_id[1].preemptions == 1


def test_newcomers_that_fit_extend_a_quiet_round():
    """A backlog that cannot start (J2 needs the whole node) and arrivals that fit idle GPUs:
    those arrival rounds see only the newcomers, and the replay is unchanged."""
    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    trace = [TraceJob(1, 3, 0.0, 5000.0), TraceJob(2, 3, 1.0, 5000.0), TraceJob(3, 8, 2.0, 100.0)]
    trace += [TraceJob(10 + i, 1, 10.0 + 20 * i, 15.0) for i in range(10)]
    params = PolicyParams(queues=(100000.0,))
    opt = SimulationOptions(interval=60.0, progress=False)
    sim, fast = replay(trace, cluster, params, "las", opt)
    _, full = replay(trace, cluster, params, "las", replace(opt, prune_rounds=False, skip_quiet_ticks=False))
    assert fast.records == full.records and sim.extended_rounds > 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=jobs_st,
    overhead=st.sampled_from([0.0, 7.0]),
    interval=st.sampled_from([0.0, 10.0, 60.0]),
    cost=st.sampled_from([0.0, 7.0, 300.0]),
)
def test_pruned_replay_equals_full_replay_with_the_indexed_last_queue(rows, overhead, interval, cost):
    # The last queue's key (the index, lowered/raised by the preemption cost) is still each job's own:
    # the `idle_first` promise the pruned rounds rely on holds.
    cluster = Cluster.from_tiresias_spec(2, 2, 4)
    trace = [TraceJob(i, g, float(s), float(d), "vgg16" if i % 2 else "resnet50") for i, (g, s, d) in enumerate(rows)]
    params = PolicyParams(
        queues=(100.0,),
        last_queue="gittins",
        preempt_cost=cost,
        distribution=ServiceDistribution([50, 200, 800, 2000, 5000]),
    )
    opt = SimulationOptions(interval=interval, preempt_overhead=overhead, progress=False)
    _, full = replay(trace, cluster, params, "gittins", replace(opt, prune_rounds=False, skip_quiet_ticks=False))
    _, fast = replay(trace, cluster, params, "gittins", opt)
    assert fast.records == full.records
    assert fast.summary.preemptions == full.summary.preemptions
