"""Discretized and continuous 2D-Gittins scheduling (Tiresias §3.2.2-3.2.3)."""

import pytest

from teiresias.errors import ConfigError
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap

D = ServiceDistribution.from_values([4, 8, 12])


def gittins(**kw):
    """The paper's 2D-Gittins unless told otherwise: FIFO last queue, FIFO order inside queues
    (the defaults are not the paper's: test_the_defaults_are_the_indexed_last_queue_and_lifo_resume)."""
    paper = {"queues": (10.0,), "distribution": D, "last_queue": "fifo", "queue_order": "fifo"}
    return build_policy("gittins", PolicyParams(**{**paper, **kw}))


def test_non_last_queue_is_sorted_by_index_with_delta_equal_to_the_threshold() -> None:
    # Q1 = [0, 10), Delta_1 = 10. G(a, 10): a=0 -> P(S<=10)=2/3, E[min(S,10)]=22/3 -> 1/11;
    # a=4 -> R={4,8}: P=1, E=6 -> 1/6; a=8 -> R={4}: 1/4. So 8 > 4 > 0, whatever start order.
    j1 = pending(1, 1, first_start_time=0.0, executed_time=0.0)
    j2 = pending(2, 1, first_start_time=1.0, executed_time=4.0)
    j3 = pending(3, 1, first_start_time=2.0, executed_time=8.0)
    plan = gittins().decide(snap(cluster(1, 8), j1, j2, j3, now=20.0))
    assert plan.order == (3, 2, 1)
    assert plan.index[1] == pytest.approx(1 / 11)
    assert plan.index[2] == pytest.approx(1 / 6)
    assert plan.index[3] == pytest.approx(1 / 4)


def test_equal_indices_break_ties_by_job_id() -> None:
    jobs = [pending(i, 1, submit=10.0 - i) for i in (3, 1, 2)]
    assert gittins().decide(snap(cluster(1, 8), *jobs)).order == (1, 2, 3)


def test_last_queue_is_fifo_by_start_time_and_has_no_index() -> None:
    # Both in Q2 (attained >= 10); job 5 has the higher G but started later.
    early = pending(4, 1, first_start_time=0.0, executed_time=10.0)
    late = pending(5, 1, first_start_time=5.0, executed_time=11.0)
    plan = gittins().decide(snap(cluster(1, 8), late, early, now=20.0))
    assert plan.order == (4, 5)
    assert plan.queues == {4: 1, 5: 1} and plan.index == {}


def test_index_order_drives_preemption_inside_a_queue() -> None:
    # One GPU. Running job 1 at a=0 (G=1/11) vs waiting job 2 at a=8 (G=1/4): swap.
    plan = gittins().decide(
        snap(cluster(1, 1), running(1, 1, {"s0n0": 1}), pending(2, 1, first_start_time=0.0, executed_time=8.0))
    )
    assert plan.preempt == (1,) and set(plan.start) == {2}


def test_a_promoted_job_is_indexed_at_attained_service_zero() -> None:
    starving = pending(1, 1, first_start_time=0.0, executed_time=20.0, waiting_time=100.0)
    plan = gittins(promote_knob=1.0).decide(snap(cluster(1, 1), starving))
    assert plan.promote == (1,) and plan.queues[1] == 0
    assert plan.index[1] == pytest.approx(D.index(0, 10.0))


def test_continuous_gittins_ranks_by_the_supremum_index() -> None:
    # G(0)=1/8, G(4)=1/6, G(8)=1/4 (see test_gittins_index).
    jobs = [pending(1, 1), pending(2, 1, executed_time=4.0), pending(3, 2, executed_time=4.0)]
    plan = gittins(continuous=True).decide(snap(cluster(1, 8), *jobs))
    assert plan.order == (3, 2, 1)  # job 3: 2 GPUs x 4 = attained 8
    assert plan.index == pytest.approx({1: 1 / 8, 2: 1 / 6, 3: 1 / 4})


def test_gittins_without_a_distribution_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--gittins-samples"):
        build_policy("gittins", PolicyParams())


def test_with_distribution_swaps_in_learned_samples() -> None:
    p = gittins()
    q = p.with_distribution(D.extended([16]))
    assert q.distribution is not p.distribution and len(q.distribution) == 4
    assert (q.thresholds, q.promote_knob, q.placement) == (p.thresholds, p.promote_knob, p.placement)


# -- policy.last_queue: gittins (not the paper's default) ---------------------
D4 = ServiceDistribution.from_values([4, 8, 12, 30])


def test_last_queue_gittins_ranks_the_last_queue_by_the_residual_index() -> None:
    # Q2 = [10, inf). a=10 -> a'=8, survivors {12,30}: G = 2/(4+22) = 1/13;
    # a=13 -> a'=12, survivors {30}: G = 1/18. So the job at 10 goes first although
    # it started later (FIFO, the default, puts the early one first).
    early = pending(4, 1, first_start_time=0.0, executed_time=13.0)
    late = pending(5, 1, first_start_time=5.0, executed_time=10.0)
    s = snap(cluster(1, 8), early, late, now=20.0)
    assert gittins(distribution=D4).decide(s).order == (4, 5)
    plan = gittins(distribution=D4, last_queue="gittins").decide(s)
    assert plan.order == (5, 4)
    assert plan.queues == {4: 1, 5: 1}
    assert plan.index[4] == pytest.approx(1 / 18) and plan.index[5] == pytest.approx(1 / 13)


def test_last_queue_index_moves_only_at_sample_points_and_ties_stay_fifo() -> None:
    # a=10 and a=11.9 lie between the samples 8 and 12: same index, so FIFO by first start.
    assert D4.residual_indices([10.0, 11.9, 12.0]).tolist() == pytest.approx([1 / 13, 1 / 13, 1 / 18])
    assert D4.next_sample_after(10.0) == 12.0 and D4.next_sample_after(30.0) == float("inf")
    first = pending(6, 1, first_start_time=0.0, executed_time=11.9)
    second = pending(7, 1, first_start_time=1.0, executed_time=10.0)
    plan = gittins(distribution=D4, last_queue="gittins").decide(snap(cluster(1, 8), second, first, now=20.0))
    assert plan.order == (6, 7)


def test_last_queue_index_preempts_a_job_deep_in_the_tail() -> None:
    # One GPU: running job 1 has outlived every sample (G = 0); waiting job 2 at a=10 has G = 1/13.
    deep = running(1, 1, {"s0n0": 1}, executed_time=40.0)
    young = pending(2, 1, first_start_time=1.0, executed_time=10.0)
    s = snap(cluster(1, 1), deep, young, now=50.0)
    assert gittins(distribution=D4).decide(s).preempt == ()
    plan = gittins(distribution=D4, last_queue="gittins").decide(s)
    assert plan.preempt == (1,) and set(plan.start) == {2}


def test_unknown_last_queue_order_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="fifo"):
        gittins(last_queue="lifo")


def test_preempt_cost_keeps_a_running_job_unless_the_swap_gains_more_than_it_costs() -> None:
    # One GPU, last queue by index. Running job 1 at a=13: expected remaining E = 30-12 = 18 GPU-s.
    # Waiting job 2, preempted before, at a=10: E = (4+22)/2 = 13. Gain 5 GPU-s; a swap costs
    # each job its cost: swap iff 18 - c > 13 + c, i.e. c < 2.5 s (1 GPU each).
    def decide(cost: float):
        s = snap(
            cluster(1, 1),
            running(1, 1, {"s0n0": 1}, executed_time=13.0),
            pending(2, 1, first_start_time=1.0, executed_time=10.0),
            now=50.0,
        )
        return gittins(distribution=D4, last_queue="gittins", preempt_cost=cost).decide(s)

    assert decide(0.0).preempt == (1,)
    assert decide(2.0).preempt == (1,)
    plan = decide(3.0)
    assert plan.preempt == () and plan.start == {}
    assert plan.index[1] == pytest.approx(1 / 15) and plan.index[2] == pytest.approx(1 / 16)
    with pytest.raises(ConfigError, match="preemption cost"):
        gittins(preempt_cost=-1.0)


def test_preempt_cost_also_weighs_swaps_inside_the_indexed_upper_queues() -> None:
    # Q1, Delta = 10, D = {4, 8, 12}. Running job 1 at a=0: P = 2/3, E[min(S,10)] = 22/3 (G = 1/11).
    # Waiting job 2 (preempted before) at a=8: P = 1, E = 4 (G = 1/4). With cost k (1 GPU each):
    # (2/3) / (22/3 - k) < 1 / (4 + k)  iff  k < 2.8: the swap happens below that cost only.
    def decide(cost: float):
        s = snap(cluster(1, 1), running(1, 1, {"s0n0": 1}), pending(2, 1, first_start_time=0.0, executed_time=8.0))
        return gittins(preempt_cost=cost).decide(s)

    assert decide(0.0).preempt == (1,) and decide(2.0).preempt == (1,)
    assert decide(3.0).preempt == ()
    assert decide(3.0).index[2] == pytest.approx(1 / 7) and decide(3.0).index[1] == pytest.approx(
        (2 / 3) / (22 / 3 - 3)
    )


def test_the_policy_snaps_to_quantile_points_so_a_job_re_ranks_a_few_times_only() -> None:
    # points=2: the one grid point is the lower median, 8. Below it a' = 0 (G = 4/54), from it on a' = 8.
    assert D4.residual_indices([5.0, 10.0, 13.0, 40.0], points=2).tolist() == pytest.approx(
        [4 / 54, 1 / 13, 1 / 13, 1 / 13]
    )
    # So with two points jobs at a=10 and a=13 tie and keep FIFO order; with every sample (None) they do not.
    early = pending(4, 1, first_start_time=0.0, executed_time=13.0)
    late = pending(5, 1, first_start_time=5.0, executed_time=10.0)
    s = snap(cluster(1, 8), early, late, now=20.0)
    from teiresias.policy.gittins_policy import GittinsPolicy
    from teiresias.policy.placement import ConsolidatePlacement

    def order(points):
        return (
            GittinsPolicy(
                ConsolidatePlacement(), D4, (10.0,), last_queue="gittins", last_queue_points=points, queue_order="fifo"
            )
            .decide(s)
            .order
        )

    assert order(2) == (4, 5) and order(None) == (5, 4)
    with pytest.raises(ConfigError, match="last queue points"):
        GittinsPolicy(ConsolidatePlacement(), D4, last_queue_points=1)


def test_the_defaults_are_the_indexed_last_queue_and_lifo_resume() -> None:
    """Not the paper's (docs/policies.md, "Defaults"): PolicyParams() and GittinsPolicy alike."""
    from teiresias.policy.gittins_policy import GittinsPolicy
    from teiresias.policy.placement import ConsolidatePlacement

    for p in (build_policy("gittins", PolicyParams(distribution=D)), GittinsPolicy(ConsolidatePlacement(), D)):
        assert (p.last_queue, p.queue_order, p.time_limits) == ("gittins", "lifo-resume", True)
    las = build_policy("las", PolicyParams())
    assert las.queue_order == "fifo"  # paper-faithful las by name
