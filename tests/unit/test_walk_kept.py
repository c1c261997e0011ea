"""The walk over a kept ranking decides what the plain walk decides (teiresias.policy.kept).

``decide_kept(waiting jobs, KeptRanking of the running ones)`` must give the
same starts (same GPUs), preemptions (same jobs, same order), promotions and
reasons as ``decide`` on the whole snapshot, for every policy option and
placement, on random snapshots: random clusters, running jobs placed on random
nodes (some over-committed by ``unavailable``, some protected by their owner:
the kept walk hands both to the plain one), waiting jobs of every state (queue
orders, time limits, per-node shapes). This is what keeps the two walks from
drifting: a new option of las or gittins goes into ``VARIANTS``.
"""

from __future__ import annotations

from dataclasses import fields

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.base import walks_kept
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.kept import KeptRanking
from teiresias.policy.mlfq import QUEUE_ORDERS
from teiresias.policy.registry import PolicyParams, build_policy

DIST = ServiceDistribution([30, 50, 120, 200, 400, 800, 2000, 5000, 9000])
# Every on/off knob of the policies (PolicyParams' bool fields, ``continuous`` and any added
# later), drawn on top of each variant, so a new option is compared without editing this file.
SWITCHES = [f.name for f in fields(PolicyParams) if f.type in ("bool", bool)]
VARIANTS = {
    "las": ("las", {}),
    "las-continuous": ("las", {"continuous": True}),
    "gittins": ("gittins", {}),
    "gittins-continuous": ("gittins", {"continuous": True}),
    "gittins-last-fifo": ("gittins", {"last_queue": "fifo"}),
    "gittins-last-gittins": ("gittins", {"last_queue": "gittins"}),
    "gittins-last-gittins-cost": ("gittins", {"last_queue": "gittins", "preempt_cost": 20.0}),
}
# The order inside a queue (PolicyParams.queue_order; None: the policy's default), drawn on
# top of every variant.
ORDERS = [None, *QUEUE_ORDERS]

job_st = st.tuples(
    st.sampled_from([1, 1, 2, 2, 3, 4, 8, 16]),  # GPUs
    st.booleans(),  # running
    st.sampled_from([0.0, 10.0, 40.0, 99.0, 100.0, 350.0, 900.0, 2500.0]),  # t_J
    st.sampled_from([None, 5.0, 9.0, 9.0, 30.0]),  # first start
    st.sampled_from([0.0, 3.0, 50.0, 400.0]),  # delta_J
    st.sampled_from([None, 0.1, 0.9]),  # skew (profile placement)
    st.integers(0, 1000),  # where a running job goes
    st.sampled_from([None, 0.0, 7.0]),  # since the first start, when it last started or stopped
    st.sampled_from([None, None, 40.0, 600.0, 5000.0]),  # time limit (s): truncates gittins
    st.sampled_from([None, None, None, 500.0, 2000.0]),  # protected until (running; now = 1000)
    st.sampled_from([0, 0, 0, 1, -1]),  # GPUs per node (waiting; -1: all on one node)
)


def _place(gpus: int, free: dict[str, int], seed: int) -> Placement | None:
    """A random valid placement: nodes taken from a seeded start, as many GPUs as each has."""
    names = list(free)
    got: dict[str, int] = {}
    left = gpus
    for k in range(len(names)):
        n = names[(seed + k * (1 + seed % 3)) % len(names)]
        take = min(free[n] - got.get(n, 0), left)
        if take > 0:
            got[n] = got.get(n, 0) + take
            left -= take
        if left == 0:
            for node, g in got.items():
                free[node] -= g
            return Placement.of(got)
    return None


def _snapshot(rows, switches, nodes, gpn, unavailable_seed):
    cluster = Cluster.from_tiresias_spec(switches, nodes, gpn)
    free = {n.name: n.gpus for n in cluster.nodes}
    jobs = []
    for i, (g, running, executed, start, waiting, skew, where, since, limit, protect, per) in enumerate(rows):
        placement = _place(g, free, where) if running else None
        run = placement is not None
        first = (start if start is not None else 1.0) if run else start
        jobs.append(
            Job(
                JobId(i),
                g,
                float(i % 7),
                state=JobState.RUNNING if run else JobState.PENDING,
                first_start_time=first,
                state_since=None if first is None or since is None else first + since + (i % 5),
                executed_time=executed if (run or start is not None) else 0.0,
                waiting_time=waiting,
                skew=skew,
                placement=placement,
                time_limit=limit,
                protected_until=protect if run else None,
                gpus_per_node=0 if run else (g if per < 0 else per),
            )
        )
    # GPUs outside the managed jobs: on free GPUs, or (unavailable_seed odd) beyond them,
    # over-committing a node (the plain walk pins its jobs; the kept walk hands it over).
    unavailable = {}
    if unavailable_seed:
        name = cluster.nodes[unavailable_seed % len(cluster.nodes)].name
        extra = 1 if unavailable_seed % 2 else 0
        unavailable[name] = max(free[name] - (unavailable_seed % 3), 0) + extra
    return cluster, jobs, unavailable


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(job_st, min_size=1, max_size=40),
    variant=st.sampled_from(sorted(VARIANTS)),
    placement=st.sampled_from(["consolidate", "spread", "profile"]),
    queues=st.sampled_from([(100.0,), (100.0, 1000.0)]),
    promote=st.sampled_from([None, 1.0]),
    shape=st.sampled_from([(1, 1, 8), (1, 3, 4), (2, 2, 4), (2, 3, 8), (1, 5, 2)]),
    unavailable_seed=st.integers(0, 12),
    keep_waiting=st.lists(st.booleans(), min_size=40, max_size=40),
    switches=st.fixed_dictionaries({name: st.booleans() for name in SWITCHES}),
    order=st.sampled_from(ORDERS),
)
def test_walk_over_a_kept_ranking_decides_as_the_plain_walk(
    rows, variant, placement, queues, promote, shape, unavailable_seed, keep_waiting, switches, order
):
    name, knobs = VARIANTS[variant]
    try:
        params = PolicyParams(
            queues=queues,
            promote_knob=promote,
            distribution=DIST,
            placement=placement,
            queue_order=order,
            **{**switches, **knobs},
        )
    except ConfigError:
        assume(False)  # knobs that do not go together
    policy = build_policy(name, params)
    assert walks_kept(policy) or params.continuous  # (the engine keeps no ranking for continuous ones)
    cluster, jobs, unavailable = _snapshot(rows, *shape, unavailable_seed)
    now = 1000.0
    plain = policy.decide(Snapshot(now, cluster, jobs, unavailable))

    running = [j for j in jobs if j.state is JobState.RUNNING]
    waiting = [j for j in jobs if j.state is JobState.PENDING]
    kept = KeptRanking(cluster)
    by_id = {j.job_id: j for j in jobs}
    for key, _ in policy.rank_keys(running, now):
        kept.add(key, by_id[key[-1]])
    # Waiting jobs whose key holds while they wait may be kept too (as the simulator keeps
    # them once asked); the others are the snapshot's, ranked by the policy in the round.
    asked = []
    for (key, until), keep in zip(sorted(policy.rank_keys(waiting, now), key=lambda t: t[0][-1]), keep_waiting):
        if keep and until == float("inf"):
            kept.add_waiting(key, by_id[key[-1]])
        else:
            asked.append(by_id[key[-1]])
    got = policy.decide_kept(Snapshot(now, cluster, asked, unavailable), kept)
    event(f"preempts {min(len(plain.preempt), 3)}, starts {min(len(plain.start), 3)}")
    event("plain walk (over-committed node or protected job)" if got.keep else "kept walk")
    event(f"{min(len(kept.waiting_jobs), 2)} kept waiting")

    assert got.start == plain.start
    assert got.preempt == plain.preempt
    assert got.promote == plain.promote
    # Every reason given is the plain walk's; the jobs the kept walk passes over (nothing left
    # for anyone, or a shape that failed already) get none: all of them wait in the plain walk.
    assert all(plain.reasons[j] == r for j, r in got.reasons.items())
    assert set(plain.preempt) <= got.reasons.keys()
    asked_ids = {j.job_id for j in asked}
    assert list(got.order) == [j for j in plain.order if j in asked_ids]
    assert got.queues == {j: q for j, q in plain.queues.items() if j in asked_ids}
    # The kept ranking itself is the owner's: the round leaves it as it was.
    assert [k[-1] for k in kept.keys] == [j.job_id for j in kept.jobs]
    assert len(kept) == len(running)


def test_kept_ranking_tracks_free_gpus_and_refuses_a_job_without_gpus():
    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    kept = KeptRanking(cluster)
    a = Job(JobId(1), 3, 0.0, state=JobState.RUNNING, placement=Placement.of({"s0n0": 2, "s0n1": 1}))
    b = Job(JobId(2), 1, 0.0, state=JobState.RUNNING, placement=Placement.of({"s0n1": 1}))
    kept.add((1, 0.0, JobId(2)), b)
    kept.add((0, 5.0, JobId(1)), a)
    assert [j.job_id for j in kept.jobs] == [1, 2]
    assert kept.free == {"s0n0": 2, "s0n1": 2} and kept.free_total == 4 and kept.overdrawn == 0
    assert kept.sizes == [3, 1] and kept.total == 4
    assert kept.discard(JobId(1)) and not kept.discard(JobId(1))
    w = Job(JobId(4), 2, 0.0)
    kept.add_waiting((0, 9.0, JobId(4)), w)
    assert JobId(4) in kept and kept.waiting_jobs == [w]
    assert not kept.discard(JobId(4)) and kept.discard_waiting(JobId(4)) and JobId(4) not in kept
    assert kept.free == {"s0n0": 4, "s0n1": 3} and kept.sizes == [1] and kept.total == 1
    big = Job(JobId(5), 4, 0.0, state=JobState.RUNNING, placement=Placement.of({"s0n1": 4}))
    kept.add((2, 0.0, JobId(5)), big)  # 5 GPUs held on a 4-GPU node: over-committed
    assert kept.free["s0n1"] == -1 and kept.overdrawn == 1 and kept.free_total == 3
    kept.discard(JobId(5))
    assert kept.overdrawn == 0 and kept.free_total == 7
    try:
        kept.add((0, 0.0, JobId(3)), Job(JobId(3), 1, 0.0))
    except ValueError as e:
        assert "running" in str(e)
    else:
        raise AssertionError("a job without a placement was kept")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(job_st, min_size=1, max_size=30),
    variant=st.sampled_from(sorted(VARIANTS)),
    queues=st.sampled_from([(100.0,), (100.0, 1000.0)]),
    promote=st.sampled_from([None, 1.0]),
    order=st.sampled_from(ORDERS),
)
def test_quiet_until_is_the_soonest_key_promise(rows, variant, queues, promote, order):
    """What lets the simulator ask ``quiet_until`` of a few jobs only (``Simulator._quiet_until``):
    it is the soonest of each job's own, a job whose key holds for ever does not move it, and
    a job whose key holds until a finite time moves it exactly then (KeyRanked)."""
    name, knobs = VARIANTS[variant]
    policy = build_policy(
        name, PolicyParams(queues=queues, promote_knob=promote, distribution=DIST, queue_order=order, **knobs)
    )
    quiet = getattr(policy, "quiet_until", None)
    if quiet is None:
        return
    cluster, jobs, _ = _snapshot(rows, 2, 3, 8, 0)
    now = 1000.0
    keys = policy.rank_keys(jobs, now)
    moving = {k[-1] for k, until in keys if until != float("inf")}
    whole = quiet(Snapshot(now, cluster, jobs))
    assert quiet(Snapshot(now, cluster, [j for j in jobs if j.job_id in moving])) == whole
    alone = {j.job_id: quiet(Snapshot(now, cluster, [j])) for j in jobs}
    assert whole == min(alone.values())
    for k, until in keys:
        if now < until < float("inf"):
            assert abs(alone[k[-1]] - until) < 1e-6


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(0, 30),
    moves=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 3), st.floats(0, 100)), max_size=30),
)
def test_rekey_many_keeps_the_ranking_sorted_with_jobs_and_sizes_aligned(n, moves):
    cluster = Cluster.from_tiresias_spec(1, 4, 64)
    kept = KeptRanking(cluster)
    jobs = {
        JobId(i): Job(
            JobId(i), 1 + i % 3, 0.0, state=JobState.RUNNING, placement=Placement.of({f"s0n{i % 4}": 1 + i % 3})
        )
        for i in range(n)
    }
    for i, j in jobs.items():
        kept.add((i % 2, float(i), i), j)
    batch = {JobId(i): (q, x, JobId(i)) for i, q, x in moves if i < n}
    kept.rekey_many(list(batch.items()))
    assert kept.keys == sorted(kept.keys)
    assert [k[-1] for k in kept.keys] == [j.job_id for j in kept.jobs]
    assert kept.sizes == [j.num_gpus for j in kept.jobs] and len(kept) == n
    for jid, key in batch.items():
        assert key in kept.keys
        kept.discard(jid)  # found under its new key
    assert len(kept) == n - len(batch)
