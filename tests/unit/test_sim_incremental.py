"""Kept rounds (``WalksKept``): handing the policy the pending jobs and the running ones as a
ranking the engine keeps between rounds changes no decision.

A policy that ranks by a key of each job alone (las, gittins) gives the
simulator those keys with until when each holds; under a backlog the engine
keeps the running jobs (and the waiting ones whose key cannot move) ranked in
a ``KeptRanking`` between rounds and hands the policy only the other pending
jobs (``Simulator._keyed_plan``; the walk over it, with what it remembers of
the last round's failures, is teiresias.policy.kept). The replay must equal,
record for record, the one where every round sees every job (``prune_rounds``
off), for every placement, on clusters of one and two switches; fifo (no keys,
never preempts) is in the comparison as the control. The traces are contended
on purpose (up to 60 jobs on 8-12 GPUs), so kept rounds do happen: the test
asserts they did."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.base import KeyRanked
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, Simulator, TraceJob

DIST = ServiceDistribution([30, 50, 120, 200, 400, 800, 2000, 5000])
VARIANTS = {
    "las": ("las", {}),
    "las-running-first": ("las", {"queue_order": "running-first"}),
    "las-lifo-resume": ("las", {"queue_order": "lifo-resume"}),
    "gittins-paper": ("gittins", {"last_queue": "fifo", "queue_order": "fifo"}),
    "gittins-last-gittins": ("gittins", {"last_queue": "gittins", "queue_order": "fifo"}),
    "gittins-last-gittins-cost": ("gittins", {"last_queue": "gittins", "preempt_cost": 20.0, "queue_order": "fifo"}),
    "gittins-default": ("gittins", {}),
    "gittins-default-cost": ("gittins", {"preempt_cost": 20.0}),
    "fifo": ("fifo", {}),
}

rows_st = st.lists(
    st.tuples(st.sampled_from([1, 1, 1, 2, 2, 4, 8]), st.integers(0, 900), st.integers(1, 3000)),
    min_size=2,
    max_size=60,
)


def replay(trace, cluster, name, params, opt):
    sim = Simulator(trace, cluster, build_policy(name, params), opt)
    return sim, sim.run()


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_st,
    variant=st.sampled_from(sorted(VARIANTS)),
    queues=st.sampled_from([(100.0,), (60.0, 600.0)]),
    overhead=st.sampled_from([0.0, 7.0]),
    interval=st.sampled_from([0.0, 10.0, 60.0]),
    promote=st.sampled_from([None, 2.0]),
    continuous=st.booleans(),
    placement=st.sampled_from(["consolidate", "spread", "profile"]),
    shape=st.sampled_from([(1, 2, 4), (2, 2, 4), (2, 3, 2)]),
    limits=st.booleans(),
)
def test_keyed_replay_equals_full_replay(
    rows, variant, queues, overhead, interval, promote, continuous, placement, shape, limits
):
    name, knobs = VARIANTS[variant]
    cluster = Cluster.from_tiresias_spec(*shape)
    trace = [
        # Declared time limits (some loose, some tight) move gittins' indices: the keys must still hold.
        TraceJob(
            i, g, float(s), float(d), "vgg16" if i % 3 else "resnet50", time_limit=d * (1 + i % 3) if limits else None
        )
        for i, (g, s, d) in enumerate(rows)
    ]
    params = PolicyParams(
        queues=queues, promote_knob=promote, distribution=DIST, continuous=continuous, placement=placement, **knobs
    )
    opt = SimulationOptions(interval=interval, preempt_overhead=overhead, progress=False)
    _, full = replay(trace, cluster, name, params, replace(opt, prune_rounds=False, skip_quiet_ticks=False))
    sim, fast = replay(trace, cluster, name, params, opt)
    assert fast.records == full.records
    assert fast.summary.preemptions == full.summary.preemptions
    if name == "fifo":
        assert sim.keyed_rounds == 0  # no keys: fifo never takes this path


def test_keyed_rounds_happen_under_a_backlog():
    """Ten 1-GPU jobs on 4 GPUs, staggered: the running ones started first rank above the
    waiting ones, so rounds leave them out; the result equals the full replay."""
    cluster = Cluster.from_tiresias_spec(1, 1, 4)
    trace = [TraceJob(i, 1, float(10 * i), 500.0 + 37 * i) for i in range(10)]
    for name in ("las", "gittins"):
        params = PolicyParams(queues=(100.0,), distribution=DIST)
        opt = SimulationOptions(interval=60.0, progress=False)
        _, full = replay(trace, cluster, name, params, replace(opt, prune_rounds=False, skip_quiet_ticks=False))
        sim, fast = replay(trace, cluster, name, params, opt)
        assert fast.records == full.records
        assert sim.keyed_rounds > 0, name


def _job(i, gpus, running, executed, start, limit=None):
    return Job(
        JobId(i),
        gpus,
        float(i),
        state=JobState.RUNNING if running else JobState.PENDING,
        first_start_time=start,
        executed_time=executed,
        waiting_time=float(3 * i % 50),
        placement=Placement.of({"n0": gpus}) if running else None,
        # lifo-resume reads when a job last started (running) or stopped (waiting, if it ran).
        state_since=None if start is None else start + float(i % 4),
        time_limit=limit,
    )


snap_st = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4]),
        st.booleans(),
        st.floats(0, 4000),
        st.sampled_from([None, 5.0, 9.0]),
        st.sampled_from([None, 50.0, 3000.0]),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    jobs=snap_st,
    variant=st.sampled_from(sorted(v for v in VARIANTS if v != "fifo")),
    promote=st.sampled_from([None, 1.0]),
    continuous=st.booleans(),
    dt=st.floats(0, 500),
)
def test_rank_keys_sort_as_decide_ranks_and_hold_until_their_time(jobs, variant, promote, continuous, dt):
    """The keys sort the jobs exactly as ``decide``'s Plan.order; a job's key recomputed
    later in the same state, before its ``until``, is the same key."""
    name, knobs = VARIANTS[variant]
    pol = build_policy(
        name,
        PolicyParams(queues=(100.0, 1000.0), promote_knob=promote, distribution=DIST, continuous=continuous, **knobs),
    )
    assert isinstance(pol, KeyRanked)
    js = [
        _job(i, g, run, e, start if start is not None or not run else 1.0, lim)
        for i, (g, run, e, start, lim) in enumerate(jobs)
    ]
    snap = Snapshot(10.0, Cluster.from_tiresias_spec(1, 1, 4096), js)
    keyed = pol.rank_keys(js, 10.0)
    assert sorted(k[-1] for k, _ in keyed) == sorted(j.job_id for j in js)
    assert tuple(k[-1] for k, _ in sorted(keyed)) == pol.decide(snap).order
    for (key, until), j in zip(sorted(keyed, key=lambda t: t[0][-1]), sorted(js, key=lambda j: j.job_id)):
        if 10.0 + dt < until - 1e-6:
            # t_J grows while a job runs, delta_J while it waits (their definitions).
            later = (
                replace(j, executed_time=j.executed_time + dt)
                if j.state is JobState.RUNNING
                else replace(j, waiting_time=j.waiting_time + dt)
            )
            assert pol.rank_keys([later], 10.0 + dt)[0][0] == key
