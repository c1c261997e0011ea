"""The aggregator's pure parts: repeat-lag period detection, per-iteration
skew, the Profile JSON round trip, the model-hook fallback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.aggregate import Profile, _combine, find_iterations, windows_skew


def seq(prefix: list[float], iteration: list[float], repeats: int, dt: float = 0.1, tail: list[float] = ()):
    sizes = np.array(prefix + iteration * repeats + list(tail), dtype=float)
    times = np.arange(len(sizes)) * dt
    return sizes, times


def test_period_and_skew_of_a_clean_sequence() -> None:
    sizes, times = seq([755240.0, 8.0], [40, 5120, 512, 524288, 147456], 10)
    it = find_iterations(sizes, times)
    assert it is not None and it.lag == 5 and it.count == 10
    assert it.period_s == pytest.approx(0.5)
    skew, total, largest = windows_skew(sizes, it)
    assert skew == pytest.approx(524288 / (40 + 5120 + 512 + 524288 + 147456))
    assert largest == 524288


def test_runs_of_equal_tensors_are_not_mistaken_for_iterations() -> None:
    # 20 equal tensors then one big one: lag 1 repeats in 95 % of positions,
    # but only the true lag covers the whole run.
    sizes, times = seq([], [100.0] * 20 + [5000.0], 8)
    it = find_iterations(sizes, times)
    assert it is not None and it.lag == 21


def test_startup_prefix_and_ragged_end_are_skipped() -> None:
    sizes, times = seq([99.0, 1e6, 3.0, 7.0], [10, 20, 30], 6, tail=[10, 20])
    it = find_iterations(sizes, times)
    assert it is not None and it.lag == 3 and it.start == 4
    assert windows_skew(sizes, it)[0] == pytest.approx(30 / 60)


def test_nothing_repeats() -> None:
    sizes = np.arange(1, 40, dtype=float)
    assert find_iterations(sizes, sizes) is None
    assert find_iterations(np.array([1.0, 2.0, 1.0]), np.arange(3.0)) is None


@settings(max_examples=60, deadline=None)
@given(
    it=st.lists(st.integers(1, 10**6), min_size=1, max_size=12),
    repeats=st.integers(3, 8),
    prefix=st.lists(st.integers(10**7, 10**8), max_size=3),
)
def test_skew_is_largest_over_total_for_any_periodic_sequence(it, repeats, prefix) -> None:
    sizes, times = seq([float(x) for x in prefix], [float(x) for x in it], repeats)
    found = find_iterations(sizes, times)
    assert found is not None
    # The iteration is found up to its own smallest repeating block (an
    # iteration made of two identical halves is indistinguishable from two).
    p = next(q for q in range(1, len(it) + 1) if len(it) % q == 0 and it == it[:q] * (len(it) // q))
    assert found.lag == p
    block = it[:p]
    assert windows_skew(sizes, found)[0] == pytest.approx(max(block) / sum(block))


def test_profile_json_round_trip() -> None:
    p = Profile(valid=True, layer="gloo", ranks=2, skew=0.7, skew_source="traffic", notes=("a", "b"))
    q = Profile.from_json(json.loads(json.dumps(p.to_json())))
    assert q == p
    assert Profile.from_json({**p.to_json(), "future_field": 1}) == p


def test_model_ratio_stands_in_only_when_traffic_cannot_tell() -> None:
    unknown = Profile.none("bucketing hides the tensors", layer="gloo", ranks=2)
    p = _combine(unknown, {"model_skew": 0.8, "model_tensors": 10})
    assert p.valid and p.skew == 0.8 and p.skew_source == "model"
    traffic = Profile(valid=True, skew=0.30, skew_source="traffic", traffic_skew=0.30, traffic_skew_valid=True)
    p = _combine(traffic, {"model_skew": 0.8, "model_tensors": 10})
    assert p.skew == 0.30 and p.skew_source == "traffic" and p.agrees is False
    assert any("differs" in n for n in p.notes)
