"""The 2D-Gittins index of Pseudocode 1 (Tiresias §3.2.2, Appendix C)."""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teiresias.errors import TraceError
from teiresias.policy.gittins import ServiceDistribution

D = ServiceDistribution.from_values([4, 8, 12])


def test_index_values_for_4_8_12_equiprobable_match_hand_derivation() -> None:
    """G(a) = sup_D P(S - a <= D | S > a) / E[min(S - a, D) | S > a], S in {4, 8, 12} w.p. 1/3.

    The ratio only peaks where D reaches a sample (between samples P is flat and
    E grows), so only D = s - a for surviving samples s need checking:

    a = 0: survivors {4, 8, 12}, remaining R = {4, 8, 12}
        D=4:  P=1/3, E=(4+4+4)/3=4       -> 1/12
        D=8:  P=2/3, E=(4+8+8)/3=20/3    -> 1/10
        D=12: P=1,   E=(4+8+12)/3=8      -> 1/8     => G(0) = 1/8 = 0.125
    a = 4: survivors {8, 12}, R = {4, 8}
        D=4:  P=1/2, E=4                 -> 1/8
        D=8:  P=1,   E=6                 -> 1/6     => G(4) = 1/6 ~ 0.167
    a = 8: survivors {12}, R = {4}
        D=4:  P=1,   E=4                 -> 1/4     => G(8) = 1/4 = 0.25

    The slides (001, "2D-Gittins Index: Example") list 0.25, 0.2, 0.125 at
    attained service 0, 4, 8: the same end values in the opposite order, and
    0.2 is not a value line 11 can take at a = 4 (for 4 <= D < 8 the ratio is
    1/(4 + D) <= 1/8, for D >= 8 it is 1/6, below 4 it is 0). Pseudocode 1 is
    the definition we implement; with it the index *rises* with attained
    service here, because every survivor of this distribution is closer to
    completion (increasing hazard rate).
    """
    assert D.index(0) == pytest.approx(1 / 8)
    assert D.index(4) == pytest.approx(1 / 6)
    assert D.index(8) == pytest.approx(1 / 4)


def test_discretized_index_uses_the_given_quantum() -> None:
    # Delta = 4 (a queue threshold Q_i^hi of 4): G(0, 4) = (1/3) / 4, G(4, 4) = (1/2) / 4.
    assert D.index(0, 4) == pytest.approx(1 / 12)
    assert D.index(4, 4) == pytest.approx(1 / 8)
    # Delta = infinity is 1 / E[S - a | S > a]: E[S] = 8.
    assert D.index(0, math.inf) == pytest.approx(1 / 8)


def test_a_job_that_outlived_every_sample_gets_index_zero() -> None:
    assert D.index(12) == 0.0 and D.index(1e9, 100) == 0.0


def brute_force(samples: list[int], a: int, delta: float | None) -> Fraction:
    """Pseudocode 1 line 11 with exact fractions, trying every candidate quantum."""
    surv = [s for s in samples if s > a]
    if not surv:
        return Fraction(0)
    deltas = [delta] if delta is not None else sorted({s - a for s in surv})
    best = Fraction(0)
    for d in deltas:
        p = Fraction(sum(1 for s in surv if s - a <= d), len(surv))
        e = Fraction(sum(min(Fraction(s - a), Fraction(d)) for s in surv), len(surv))
        best = max(best, p / e)
    return best


@settings(max_examples=150, deadline=None)
@given(
    samples=st.lists(st.integers(1, 60), min_size=1, max_size=25),
    a=st.integers(0, 70),
    delta=st.one_of(st.none(), st.integers(1, 80)),
)
def test_prefix_sum_index_equals_the_definition(samples, a, delta) -> None:
    d = ServiceDistribution.from_values(samples)
    assert d.index(a, delta) == pytest.approx(float(brute_force(samples, a, delta)), rel=1e-9, abs=1e-12)


def test_extended_learns_new_samples_without_changing_the_original() -> None:
    more = D.extended([16])
    assert len(D) == 3 and len(more) == 4
    # a = 12: survivor {16}, remaining 4 -> 1/4; the old distribution knows nothing there.
    assert more.index(12) == pytest.approx(1 / 4) and D.index(12) == 0.0


def test_live_samples_may_include_zero_but_not_negative_or_nan() -> None:
    # The controller feeds GPU-seconds of finished jobs; one may have taken none.
    d = ServiceDistribution.from_values([0.0, 4.0])
    assert d.index(0) == pytest.approx(1 / 4)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(TraceError, match="not a non-negative finite number"):
            ServiceDistribution.from_values([4.0, bad])
    with pytest.raises(TraceError, match="at least one"):
        ServiceDistribution.from_values([])


@settings(max_examples=100, deadline=None)
@given(
    samples=st.lists(st.floats(0.5, 1e6), min_size=1, max_size=40),
    pairs=st.lists(
        st.tuples(st.floats(0, 2e6), st.sampled_from([1.0, 60.0, 3600.0, 1e5, math.inf])), min_size=1, max_size=20
    ),
)
def test_vectorized_indices_equal_the_scalar_ones_exactly(samples, pairs) -> None:
    """Exactly, not approximately: equal indices must tie, so the ranking is the same."""
    d = ServiceDistribution.from_values(samples)
    got = d.indices([a for a, _ in pairs], [x for _, x in pairs])
    assert [float(g) for g in got] == [d.index(a, x) for a, x in pairs]
