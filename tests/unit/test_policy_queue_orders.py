"""Orders inside an MLFQ queue (``PolicyParams.queue_order``; docs/policies.md, "Order inside a queue").

``fifo`` is the paper's (§3.2.3: FIFO by first start time); ``running-first``
and ``lifo-resume`` are the reference simulator's queue lists (running jobs
stay ahead of waiting ones; a preempted job goes back at the head of the
waiting ones). Across queues nothing changes: a higher queue still preempts.
"""

import pytest

from teiresias.errors import ConfigError
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap

# One 4-GPU node; queues at 100 GPU-s: executed 60 s x 4 GPUs = 240 puts a job in the last queue.
C = cluster(1, 4)
DIST = ServiceDistribution([50, 150, 300, 600, 1200, 5000])


def las(order: str, **kw):
    return build_policy("las", PolicyParams(queues=(100.0,), queue_order=order, **kw))


def gittins(order: str, **kw):
    return build_policy(
        "gittins", PolicyParams(queues=(100.0,), queue_order=order, distribution=DIST, last_queue="gittins", **kw)
    )


def preempted(job_id: int, started: float, stopped: float, executed: float = 60.0):
    """A last-queue job preempted at ``stopped`` after first starting at ``started``."""
    return pending(job_id, 4, submit=0.0, first_start_time=started, executed_time=executed, state_since=stopped)


def holding(job_id: int, started: float, since: float, executed: float = 60.0):
    """A last-queue job running on the whole node since ``since`` (first start ``started``)."""
    return running(job_id, 4, {"s0n0": 4}, first_start_time=started, executed_time=executed, state_since=since)


def test_fifo_lets_an_earlier_started_waiting_job_take_a_running_jobs_gpus() -> None:
    old, new = preempted(1, started=10.0, stopped=200.0), holding(2, started=50.0, since=200.0)
    plan = las("fifo").decide(snap(C, old, new, now=300.0))
    assert plan.preempt == (2,) and set(plan.start) == {1}


@pytest.mark.parametrize("order", ["running-first", "lifo-resume"])
def test_a_running_job_keeps_its_place_against_a_waiting_job_of_its_queue(order: str) -> None:
    old, new = preempted(1, started=10.0, stopped=200.0), holding(2, started=50.0, since=200.0)
    for policy in (las(order), gittins(order)):
        plan = policy.decide(snap(C, old, new, now=300.0))
        assert plan.preempt == () and plan.start == {}, policy.name
        assert plan.order == (2, 1)


@pytest.mark.parametrize("order", ["running-first", "lifo-resume"])
def test_a_higher_queue_still_preempts(order: str) -> None:
    """Strict priority across queues stays: a new job (queue 0) takes a last-queue job's GPUs."""
    fresh = pending(3, 4, submit=250.0)
    plan = las(order).decide(snap(C, fresh, holding(2, started=50.0, since=200.0), now=300.0))
    assert plan.preempt == (2,) and set(plan.start) == {3}


def test_running_first_resumes_the_earliest_started_waiting_job() -> None:
    a, b = preempted(1, started=10.0, stopped=100.0), preempted(2, started=50.0, stopped=200.0)
    plan = las("running-first").decide(snap(C, a, b, now=300.0))
    assert set(plan.start) == {1}


def test_lifo_resume_resumes_the_last_preempted_job_first() -> None:
    a, b = preempted(1, started=10.0, stopped=100.0), preempted(2, started=50.0, stopped=200.0)
    plan = las("lifo-resume").decide(snap(C, a, b, now=300.0))
    assert set(plan.start) == {2}
    assert plan.order == (2, 1)


def test_lifo_resume_preempts_the_last_started_running_job_first() -> None:
    """Two 2-GPU last-queue jobs; a new 2-GPU job needs one of them: the one that (re)started last
    gives way, though it first started earlier (fifo would take the later first start)."""
    early_restarted = running(1, 2, {"s0n0": 2}, first_start_time=10.0, executed_time=60.0, state_since=250.0)
    late_steady = running(2, 2, {"s0n0": 2}, first_start_time=40.0, executed_time=60.0, state_since=100.0)
    fresh = pending(3, 2, submit=280.0)
    jobs = (early_restarted, late_steady, fresh)
    assert las("lifo-resume").decide(snap(C, *jobs, now=300.0)).preempt == (1,)
    assert las("running-first").decide(snap(C, *jobs, now=300.0)).preempt == (2,)


def test_lifo_resume_without_state_since_falls_back_to_first_start() -> None:
    """An owner that does not know when a job last changed state gets the first start's order."""
    a = pending(1, 4, first_start_time=10.0, executed_time=60.0)
    b = pending(2, 4, first_start_time=50.0, executed_time=60.0)
    plan = las("lifo-resume").decide(snap(C, a, b, now=300.0))
    assert set(plan.start) == {2}  # -first start: the later first start is the more recent run


def test_keys_rank_as_decide_ranks() -> None:
    """rank_keys is the ranking decide uses, job by job (KeyRanked), for every order."""
    jobs = [
        preempted(1, started=10.0, stopped=100.0),
        preempted(2, started=50.0, stopped=200.0),
        holding(3, started=5.0, since=220.0),
        pending(4, 4, submit=290.0),
    ]
    for order in ("fifo", "running-first", "lifo-resume"):
        for policy in (las(order), gittins(order)):
            keyed = sorted(policy.rank_keys(jobs, 300.0))
            assert tuple(k[-1] for k, _ in keyed) == policy.decide(snap(C, *jobs, now=300.0)).order


def test_an_unknown_order_is_one_line() -> None:
    with pytest.raises(ConfigError, match="queue order 'lifo': choose one of fifo, running-first, lifo-resume"):
        PolicyParams(queue_order="lifo")
