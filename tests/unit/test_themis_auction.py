"""The partial-allocation auction (Themis Pseudocode 1, lines 5-12) solved with HiGHS."""

from __future__ import annotations

import itertools
import math

import pytest

from teiresias.policy.themis.auction import MAX_LEVELS, Bid, auction, bid_levels, pay


def _brute_force(bids, total):
    """Reference: the level choice maximizing prod 1/rho within ``total`` GPUs (one node)."""
    best, best_v = None, -math.inf
    for choice in itertools.product(*(range(len(b.gpus)) for b in bids)):
        if sum(b.gpus[l] for b, l in zip(bids, choice)) > total:
            continue
        v = sum(-math.log(b.rho[l]) for b, l in zip(bids, choice))
        if v > best_v + 1e-12:
            best, best_v = choice, v
    return best


def test_proportional_fair_levels_match_brute_force():
    bids = [
        Bid("a", (0, 1, 2, 4), (4.0, 2.0, 1.5, 1.0)),
        Bid("b", (0, 2, 4), (3.0, 1.2, 0.9)),
        Bid("c", (0, 1, 3), (2.0, 1.1, 0.8)),
    ]
    out = auction(bids, {"n0": 4, "n1": 2})
    ref = _brute_force(bids, 6)
    assert tuple(out.level[b.app] for b in bids) == ref
    assert sum(out.pf_gpus.values()) <= 6


def test_node_capacity_is_respected_per_node():
    # Two apps want 3 GPUs each; nodes of 2 GPUs hold 4 in all: only one can get its 3
    # (counted per node: 2 + 1), the other gets its 1-GPU level.
    bids = [Bid("a", (0, 1, 3), (5.0, 2.0, 1.0)), Bid("b", (0, 1, 3), (5.0, 2.0, 1.0))]
    out = auction(bids, {"n0": 2, "n1": 2})
    assert sorted(out.pf_gpus.values()) == [1, 3]


def test_hidden_payment_is_a_fraction_below_one_under_contention():
    bids = [Bid("a", (0, 2, 4), (4.0, 1.5, 1.0)), Bid("b", (0, 2, 4), (4.0, 1.5, 1.0))]
    out = auction(bids, {"n0": 4})
    for app in ("a", "b"):
        assert 0.0 < out.fraction[app] < 1.0
        assert out.granted[app] in (0, 2) and out.granted[app] <= out.pf_gpus[app]
    # Alone, an app pays nothing.
    solo = auction([bids[0]], {"n0": 4})
    assert solo.fraction["a"] == 1.0 and solo.granted["a"] == 4


def test_scaling_every_bid_of_an_app_changes_no_allocation():
    """Strategy-proofness of reports that scale rho: a constant factor shifts the app's log-valuation
    by a constant, so neither the proportional-fair levels nor anyone's payment moves."""
    bids = [Bid("a", (0, 1, 2, 4), (4.0, 2.0, 1.5, 1.0)), Bid("b", (0, 2, 4), (3.0, 1.2, 0.9))]
    honest = auction(bids, {"n0": 4})
    lied = auction([Bid("a", bids[0].gpus, tuple(0.5 * r for r in bids[0].rho)), bids[1]], {"n0": 4})
    assert lied.level == honest.level and lied.granted == honest.granted
    assert lied.fraction == pytest.approx(honest.fraction)


def test_bid_levels_are_bounded_and_within_the_gpus_on_auction():
    levels = [(g, 1.0) for g in range(1, 101)]
    chosen = bid_levels(levels, 64)
    assert len(chosen) <= MAX_LEVELS - 1
    assert all(levels[i][0] <= 64 for i in chosen)
    assert chosen[-1] == 63  # the largest usable level is always offered
    assert bid_levels([(8, 1.0)], 4) == []


def test_an_indivisible_level_is_kept_with_probability_c():
    """GPUs are indivisible and a job is gang-scheduled: c_i x an 8-GPU level is paid in expectation
    (the level with probability c_i, else nothing), never rounded down to a count no job can use.
    Rounding down (floor(c_i x 8) = 5 here) took every GPU from a one-job app that won."""
    bids = [Bid("a", (0, 8), (9.0, 1.0)), Bid("b", (0, 8), (3.0, 1.0))]
    draws = [auction(bids, {"n0": 8}, seed=f"round{k}") for k in range(400)]
    first = draws[0]
    assert first.pf_gpus == {"a": 8, "b": 0}  # a gains more (9 -> 1 against 3 -> 1)
    c = first.fraction["a"]
    assert c == pytest.approx(1.0 / 3.0)  # b's valuation without a (1) over with a (1/3)
    kept = [d.granted["a"] for d in draws]
    assert set(kept) == {0, 8}
    assert sum(kept) / len(kept) == pytest.approx(8 * c, abs=0.8)
    assert auction(bids, {"n0": 8}, seed="x") == auction(bids, {"n0": 8}, seed="x")  # seeded


def test_pay_keeps_one_of_the_apps_levels_with_the_expected_gpus():
    levels = (0, 1, 3, 8)
    assert pay(levels, 3, 1.0, 0.99) == 8
    # c x 8 = 4: between levels 3 and 8, the 8 with probability (4 - 3) / (8 - 3) = 0.2.
    assert pay(levels, 3, 0.5, 0.19) == 8 and pay(levels, 3, 0.5, 0.21) == 3
    mean = sum(pay(levels, 3, 0.5, (k + 0.5) / 1000) for k in range(1000)) / 1000
    assert mean == pytest.approx(4.0, abs=0.01)
