"""YARN-CS FIFO and Best-effort (Tiresias §5.1 baselines)."""

from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap


def test_fifo_orders_by_submit_time_then_job_id() -> None:
    s = snap(cluster(1, 8), pending(5, 1, submit=2.0), pending(3, 1, submit=1.0), pending(4, 1, submit=1.0))
    plan = build_policy("fifo").decide(s)
    assert plan.order == (3, 4, 5)
    assert set(plan.start) == {3, 4, 5}


def test_fifo_head_of_line_blocks_everything_behind_it() -> None:
    # 4 GPUs free; the head wants 8, a 1-GPU job behind it must not jump it.
    s = snap(cluster(2, 4), running(1, 4, {"s0n0": 4}), pending(2, 8, submit=1.0), pending(3, 1, submit=2.0))
    plan = build_policy("fifo").decide(s)
    assert plan.start == {}
    assert plan.reasons[2] == "waiting for 8 GPUs, 4 free"
    assert plan.reasons[3] == "blocked behind job 2 (fifo)"


def test_best_effort_lets_a_fitting_job_jump_a_blocked_head() -> None:
    s = snap(cluster(2, 4), running(1, 4, {"s0n0": 4}), pending(2, 8, submit=1.0), pending(3, 1, submit=2.0))
    plan = build_policy("best-effort").decide(s)
    assert set(plan.start) == {3}
    assert 2 in plan.reasons


def test_fifo_and_best_effort_never_preempt() -> None:
    # An older waiting job does not push out a younger running one.
    s = snap(cluster(1, 4), running(2, 4, {"s0n0": 4}, submit=5.0), pending(1, 4, submit=0.0))
    for name in ("fifo", "best-effort"):
        plan = build_policy(name, PolicyParams()).decide(s)
        assert plan.preempt == () and plan.keep == (2,) and plan.start == {}


def test_a_job_asking_for_no_gpus_never_starts_and_says_why() -> None:
    plan = build_policy("best-effort").decide(snap(cluster(1, 4), pending(1, 0), pending(2, 1)))
    assert set(plan.start) == {2}
    assert plan.reasons[1] == "asks for 0 GPUs: teiresias schedules GPU jobs only"
