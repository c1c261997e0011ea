"""Discretized 2D-LAS (Tiresias §3.2.3, Pseudocode 2): one test per rule."""

from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap


def las(**kw):
    return build_policy("las", PolicyParams(**{"queues": (100.0,), **kw}))


def test_demotion_happens_exactly_at_the_threshold() -> None:
    # attained service = GPUs x executed time; 2 x 50 = 100 reaches the threshold.
    below = pending(1, 2, executed_time=49.9)
    at = pending(2, 2, executed_time=50.0)
    plan = las().decide(snap(cluster(1, 8), below, at))
    assert plan.queues == {1: 0, 2: 1}
    assert all(type(q) is int for q in plan.queues.values())  # plain ints, e.g. for JSON


def test_more_thresholds_make_more_queues() -> None:
    jobs = [pending(i, 1, executed_time=t) for i, t in enumerate([0, 99, 100, 999, 1000, 1e9])]
    plan = las(queues=(100.0, 1000.0)).decide(snap(cluster(1, 8), *jobs))
    assert [plan.queues[i] for i in range(6)] == [0, 0, 1, 1, 2, 2]


def test_inside_a_queue_fifo_is_by_first_start_time_not_submit_time() -> None:
    # Job 1 was submitted first but started later than job 2.
    j1 = pending(1, 4, submit=0.0, first_start_time=20.0, executed_time=1.0)
    j2 = pending(2, 4, submit=5.0, first_start_time=10.0, executed_time=1.0)
    plan = las().decide(snap(cluster(1, 4), j1, j2, now=30.0))
    assert plan.order == (2, 1)
    assert set(plan.start) == {2}


def test_never_started_jobs_queue_behind_started_ones() -> None:
    fresh = pending(1, 4, submit=0.0)
    resumed = pending(2, 4, submit=9.0, first_start_time=10.0, executed_time=5.0)
    plan = las().decide(snap(cluster(1, 4), fresh, resumed, now=30.0))
    assert plan.order == (2, 1)


def test_higher_queue_goes_first_whatever_the_start_time() -> None:
    old = pending(1, 4, first_start_time=0.0, executed_time=200.0)  # Q2
    new = pending(2, 4, submit=50.0)  # Q1
    plan = las().decide(snap(cluster(1, 4), old, new, now=60.0))
    assert plan.order == (2, 1) and set(plan.start) == {2}


def test_a_job_that_does_not_fit_is_skipped_and_later_jobs_still_start() -> None:
    # 4 GPUs; job 1 (8 GPUs) cannot run, jobs 2 and 3 behind it can.
    s = snap(cluster(1, 4), pending(1, 8), pending(2, 2, submit=1.0), pending(3, 2, submit=2.0))
    plan = las().decide(s)
    assert set(plan.start) == {2, 3}
    assert plan.reasons[1] == "waiting for 8 GPUs, 4 free"


def test_a_running_job_that_no_longer_fits_is_preempted() -> None:
    # Job 2 demoted to Q2 while a new Q1 job needs its GPUs.
    old = running(2, 4, {"s0n0": 4}, executed_time=30.0)  # 120 GPU-s: Q2
    new = pending(3, 4, submit=10.0)
    plan = las().decide(snap(cluster(1, 4), old, new, now=40.0))
    assert plan.preempt == (2,) and set(plan.start) == {3}
    assert plan.reasons[2] == "preempted by higher-priority job 3"


def test_all_or_nothing_no_partial_allocation() -> None:
    # 3 GPUs free in total; a 4-GPU job gets nothing rather than 3.
    s = snap(cluster(1, 4), running(1, 1, {"s0n0": 1}), pending(2, 4, submit=1.0, first_start_time=None))
    plan = las().decide(s)
    assert 2 not in plan.start and plan.keep == (1,)


def test_starving_job_is_promoted_when_waiting_reaches_knob_times_executed() -> None:
    # Q2 job (executed 60 s on 2 GPUs) has waited 120 s = 2 x 60: promoted with knob 2.
    starving = pending(1, 2, first_start_time=0.0, executed_time=60.0, waiting_time=120.0)
    young = pending(2, 2, submit=100.0, first_start_time=100.0, executed_time=10.0)
    plan = las(promote_knob=2.0).decide(snap(cluster(1, 2), starving, young, now=200.0))
    assert plan.promote == (1,)
    assert plan.queues[1] == 0
    # Treated as Q1 this round, and it started first (earlier start time).
    assert plan.order[0] == 1 and set(plan.start) == {1}


def test_no_promotion_just_below_the_knob_or_when_off_or_running() -> None:
    almost = pending(1, 2, first_start_time=0.0, executed_time=60.0, waiting_time=119.0)
    assert las(promote_knob=2.0).decide(snap(cluster(1, 2), almost)).promote == ()
    starving = pending(1, 2, first_start_time=0.0, executed_time=60.0, waiting_time=1e9)
    assert las().decide(snap(cluster(1, 2), starving)).promote == ()  # knob None = infinity
    busy = running(1, 2, {"s0n0": 2}, executed_time=60.0, waiting_time=1e9)
    assert las(promote_knob=2.0).decide(snap(cluster(1, 2), busy)).promote == ()


def test_after_the_owner_resets_a_promoted_job_it_stays_in_q1_without_promotion() -> None:
    # What the owner does with plan.promote: t_J = delta_J = 0.
    reset = pending(1, 2, first_start_time=0.0, executed_time=0.0, waiting_time=0.0)
    plan = las(promote_knob=2.0).decide(snap(cluster(1, 2), reset))
    assert plan.queues[1] == 0 and plan.promote == ()


def test_q1_jobs_are_never_promoted() -> None:
    q1 = pending(1, 1, first_start_time=0.0, executed_time=10.0, waiting_time=1e6)
    assert las(promote_knob=1.0).decide(snap(cluster(1, 1), q1)).promote == ()


def test_continuous_las_ranks_by_attained_service_then_job_id() -> None:
    jobs = [
        pending(1, 2, executed_time=1.0),
        pending(2, 1, executed_time=1.0),
        pending(3, 1, executed_time=2.0),
        pending(4, 1),
    ]
    plan = las(continuous=True).decide(snap(cluster(1, 8), *jobs))
    # attained: 1 -> 2, 2 -> 1, 3 -> 2, 4 -> 0
    assert plan.order == (4, 2, 1, 3)
    assert plan.promote == () and set(plan.queues.values()) == {0}
