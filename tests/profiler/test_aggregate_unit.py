"""The aggregator's pure parts: repeat-lag period detection, per-iteration
skew, the Profile JSON round trip, the model-hook fallback."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.aggregate import (
    Collectives,
    ModelFile,
    Profile,
    _combine,
    _startup_broadcast,
    ddp_buckets,
    find_iterations,
    settle_iterations,
    windows_skew,
)


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


MIB = 2**20


def test_ddp_bucket_layout() -> None:
    # torch 2.x: reverse registration order; default cap: 1 MiB first bucket, then 25 MiB.
    linears = [1800 * 1800 * 4, 1800 * 4] * 5
    assert ddp_buckets(linears, None) == [12967200, 38901600, 12967200]
    assert ddp_buckets(linears, 1e-6) == list(reversed(linears))  # one bucket per tensor
    assert ddp_buckets(linears, 12) == [12967200] * 5  # docs/profiler.md: a 12 MiB cap gives skew 0.20
    assert ddp_buckets([100, 200], None) == [300]  # under the first cap: one bucket
    assert ddp_buckets([30 * MIB], 25) == [30 * MIB]


def test_model_bucket_skew_stands_in_only_when_traffic_cannot_tell() -> None:
    model = ModelFile(sizes=(800, 100, 100), bucket_cap_mb=1e-6)  # per-tensor buckets: 0.8
    unknown = Profile.none("too few iterations recorded", layer="gloo", ranks=2)
    p = _combine(unknown, model)
    assert p.valid and p.skew == 0.8 and p.skew_source == "model"
    traffic = Profile(valid=True, skew=0.30, skew_source="traffic", traffic_skew=0.30, traffic_skew_valid=True)
    p = _combine(traffic, model)
    assert p.skew == 0.30 and p.skew_source == "traffic" and p.agrees is False
    assert any("differs" in n for n in p.notes)
    # Default buckets: all 1000 bytes in one bucket; the tensor ratio is shown, not used.
    p = _combine(unknown, ModelFile(sizes=(800, 100, 100)))
    assert p.skew == 1.0 and p.model_skew == 0.8 and p.model_buckets == 1


def coll(sizes: np.ndarray, times: np.ndarray, marks: list[float] = (), startup: float | None = None) -> Collectives:
    # NCCL-like sizes (gradient_factor 1): a collective's size is its gradient bytes.
    return Collectives(
        sizes=sizes,
        times=times,
        per_rank_sent=float(sizes.sum()),
        layer="nccl",
        startup_broadcast=startup,
        marks=np.array(marks, dtype=float),
    )


BLOCK = [4.0, 4.0, 4.0, 1024.0]


def test_identical_blocks_regrouped_by_bytes() -> None:
    # 12 identical blocks per iteration, 10 iterations: the repeat-lag finder
    # sees 120 "iterations" of one block; the model's bytes say 12 blocks.
    sizes, times = seq([9.0], BLOCK * 12 * 10, 1)
    it = find_iterations(sizes, times)
    assert it is not None and it.lag == 4
    model = 12 * sum(BLOCK)
    done, problem, notes = settle_iterations(coll(sizes, times), it, model, "the model", 3)
    assert problem == "" and done is not None and done.lag == 48 and done.count == 10
    assert windows_skew(sizes, done)[0] == pytest.approx(1024 / model)
    # The same from iteration marks (one per forward, before each iteration).
    marks = [times[1 + 48 * j] - 0.05 for j in range(10)]
    done, _, notes = settle_iterations(coll(sizes, times, marks), it, None, "", 3)
    assert done is not None and done.lag == 48 and "iteration marks" in notes[0]


def test_pattern_that_cannot_be_an_iteration_is_never_valid() -> None:
    sizes, times = seq([], [10.0, 20.0, 70.0], 10)
    it = find_iterations(sizes, times)
    # The pattern reduces 100 bytes; a model of 250 bytes is no whole multiple.
    done, problem, _ = settle_iterations(coll(sizes, times), it, 250.0, "the model hook's parameter sizes", 3)
    assert done is None and problem.startswith("no consistent iteration") and "model hook" in problem
    # Twice the model per pattern: not an iteration either.
    done, problem, _ = settle_iterations(coll(sizes, times), it, 50.0, "the model", 3)
    assert done is None and "no consistent iteration" in problem
    # Agreeing bytes (within 10 %) pass unchanged.
    done, problem, _ = settle_iterations(coll(sizes, times), it, 104.0, "the model", 3)
    assert done == it and problem == ""


def test_startup_broadcast_counts_only_when_the_first_allreduce_confirms_it() -> None:
    # gloo, 2 ranks: DDP broadcasts the model M once, then all-reduces every
    # gradient in one bucket (2(n-1) x M on the wire), then the steady buckets.
    m = 1000.0
    sizes = np.array([16.0, m, 2 * m, 100.0, 900.0])
    bcast = np.array([True, True, False, False, False])
    allred = ~bcast
    assert _startup_broadcast(sizes, bcast, allred, 1, 2.0) == pytest.approx(m + 16)
    # The job broadcast its own copy of the state too: the model would look
    # twice its size and pair up real iterations; unconfirmed, not used.
    sizes2 = np.array([m, m, 2 * m, 100.0, 900.0])
    assert _startup_broadcast(sizes2, bcast, allred, 1, 2.0) is None
    assert _startup_broadcast(sizes, bcast, np.zeros(5, bool), 1, 2.0) is None


def test_too_few_iterations_after_regrouping() -> None:
    sizes, times = seq([], BLOCK * 12 * 2, 1)  # two iterations of 12 blocks
    it = find_iterations(sizes, times)
    done, problem, _ = settle_iterations(coll(sizes, times), it, 12 * sum(BLOCK), "the model", 3)
    assert done is None and problem.startswith("too few iterations recorded")
