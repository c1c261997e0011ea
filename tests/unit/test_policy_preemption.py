"""Preemption picks exactly the lowest-priority jobs needed (Pseudocode 2, lines 14-18)."""

from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap


def las():
    return build_policy("las", PolicyParams(queues=(100.0,)))


def q2_running(job_id: int, gpus: int, on: dict, start: float) -> object:
    # executed 200 s: attained >= 100 GPU-s, so it sits in Q2 below any new job.
    return running(job_id, gpus, on, submit=start, first_start_time=start, executed_time=200.0)


def test_idle_gpus_are_used_before_anyone_is_preempted() -> None:
    s = snap(cluster(2, 4), q2_running(1, 4, {"s0n0": 4}, 0.0), pending(2, 4, submit=10.0), now=20.0)
    plan = las().decide(s)
    assert plan.preempt == () and plan.start[2].nodes == ("s0n1",)


def test_only_the_lowest_priority_running_jobs_are_preempted() -> None:
    # Two Q2 jobs each hold a whole node; job 1 started first so ranks higher.
    # A new 4-GPU job needs one node: only job 3 (lowest) must go.
    s = snap(
        cluster(2, 4),
        q2_running(1, 4, {"s0n0": 4}, 0.0),
        q2_running(3, 4, {"s0n1": 4}, 5.0),
        pending(2, 4, submit=10.0),
        now=20.0,
    )
    plan = las().decide(s)
    assert plan.preempt == (3,) and plan.keep == (1,)
    assert plan.start[2].nodes == ("s0n1",)


def test_as_many_victims_as_needed_and_no_more() -> None:
    # Four 1-GPU Q2 jobs on one 4-GPU node; a new 2-GPU job evicts the two youngest.
    jobs = [q2_running(i, 1, {"s0n0": 1}, float(i)) for i in range(1, 5)]
    plan = las().decide(snap(cluster(1, 4), *jobs, pending(9, 2, submit=10.0), now=20.0))
    assert sorted(plan.preempt) == [3, 4] and sorted(plan.keep) == [1, 2]


def test_nothing_is_preempted_for_a_job_that_still_cannot_start() -> None:
    # 8 GPUs exist, the new job wants 16: evicting would not help.
    s = snap(cluster(2, 4), q2_running(1, 4, {"s0n0": 4}, 0.0), pending(2, 16, submit=10.0), now=20.0)
    plan = las().decide(s)
    assert plan.preempt == () and plan.start == {}


def test_higher_priority_running_jobs_are_not_on_offer() -> None:
    # Job 1 (Q1) holds the GPUs; a Q2 waiting job cannot push it out.
    s = snap(
        cluster(1, 4),
        running(1, 4, {"s0n0": 4}, executed_time=1.0),
        pending(2, 4, first_start_time=0.0, executed_time=100.0),
        now=20.0,
    )
    plan = las().decide(s)
    assert plan.keep == (1,) and plan.preempt == () and plan.start == {}


def test_a_preempted_jobs_other_gpus_go_to_the_next_jobs() -> None:
    # Job 1 (Q2) spans both nodes (2+2). New job 2 needs 4 on one node (consolidated),
    # so job 1 goes; its 2 GPUs on the other node then serve job 3.
    s = snap(
        cluster(2, 4),
        q2_running(1, 4, {"s0n0": 2, "s0n1": 2}, 0.0),
        pending(2, 4, submit=10.0),
        pending(3, 4, submit=11.0),
        now=20.0,
    )
    plan = las().decide(s)
    assert plan.preempt == (1,)
    assert set(plan.start) == {2, 3}


def test_unavailable_gpus_never_evict_a_running_job() -> None:
    # The node is draining (all 4 GPUs unavailable) but job 1 still runs there.
    s = snap(cluster(1, 4), running(1, 4, {"s0n0": 4}), pending(2, 1), unavailable={"s0n0": 4})
    plan = las().decide(s)
    assert plan.keep == (1,) and plan.preempt == () and plan.start == {}


def test_a_drained_nodes_gpus_are_not_handed_out_by_preemption() -> None:
    # s0n0 drains (all 4 GPUs unavailable) under the lowest-priority Q2 job. A new
    # Q1 job must not evict it to run there: it evicts job 2 on the healthy node.
    low = q2_running(1, 4, {"s0n0": 4}, 5.0)
    busy = q2_running(2, 4, {"s0n1": 4}, 1.0)
    new = pending(3, 4, submit=10.0)
    plan = las().decide(snap(cluster(2, 4), low, busy, new, now=20.0, unavailable={"s0n0": 4}))
    assert 1 in plan.keep and plan.preempt == (2,)
    assert plan.start[3].nodes == ("s0n1",)
