"""SJF-BSBF's pure model: Theorem 1, the sub-batch search, eq. 7 (docs/sjf-bsbf.md)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teiresias.errors import ConfigError
from teiresias.policy.sjf_bsbf.model import SharingModel, SharingProfile
from teiresias.policy.sjf_bsbf.pair import decide_pair, inserted_at, overlapped, sequential

pos = st.floats(min_value=1.0, max_value=1e5)
xi = st.floats(min_value=1.0, max_value=6.0)


@settings(max_examples=300, deadline=None)
@given(t1=pos, t2=pos, xi1=xi, xi2=xi)
def test_theorem_1_no_insertion_point_beats_both_ends(t1, t2, xi1, xi2) -> None:
    """Over a grid of insertion times tau in [0, t1], the pair's average completion time is never
    below the better of tau = 0 (overlapped) and tau = t1 (sequential, full batch = the same t2 here)."""
    best_end = min(overlapped(t1, t2, xi1, xi2).average, sequential(t1, t2).average)
    assert inserted_at(0.0, t1, t2, xi1, xi2).average == pytest.approx(overlapped(t1, t2, xi1, xi2).average)
    assert inserted_at(t1, t1, t2, xi1, xi2).average == pytest.approx(sequential(t1, t2).average)
    for k in range(1, 50):
        tau = t1 * k / 50
        assert inserted_at(tau, t1, t2, xi1, xi2).average >= best_end - 1e-6 * (t1 + t2)


def test_overlapped_times_by_hand() -> None:
    # Host 990 s left, guest 100 s, both 1.5x: the guest ends at 150 having slowed the host
    # by 150 * (1 - 1/1.5) = 50 s.
    o = overlapped(990.0, 100.0, 1.5, 1.5)
    assert (o.host_end, o.guest_end) == pytest.approx((1040.0, 150.0))
    # Host ends first: 100 s x 2 = 200; the guest did 200 / 1.5 of 1000, the rest alone.
    o = overlapped(100.0, 1000.0, 2.0, 1.5)
    assert (o.host_end, o.guest_end) == pytest.approx((200.0, 200.0 + 1000.0 - 200.0 / 1.5))
    s = sequential(100.0, 1000.0)
    assert (s.host_end, s.guest_end) == (100.0, 1100.0)


def test_iteration_time_grows_as_the_sub_batch_shrinks() -> None:
    p = SharingProfile(batch=64)
    times = [p.iteration_time(b) for b in p.sub_batches(1)]
    assert p.sub_batches(1) == (64, 32, 16, 8, 4, 2, 1)
    assert p.sub_batches(8) == (64, 32, 16, 8)
    assert times[0] == pytest.approx(1.0)
    assert all(b > a for a, b in zip(times, times[1:]))
    # No fixed per-micro-batch cost and no communication: accumulation costs nothing.
    free = SharingProfile(batch=64, compute_fixed=0.0, sync=0.0)
    assert free.iteration_time(8) == pytest.approx(1.0)


def test_search_picks_the_largest_sub_batch_that_fits_memory() -> None:
    m = SharingModel(
        profiles={
            "big": SharingProfile(batch=64, memory_gb=8.0, fixed_memory_gb=2.0),
            "small": SharingProfile(batch=32, memory_gb=6.0, fixed_memory_gb=1.0),
        },
        gpu_memory_gb=11.0,
    )
    # Beside big (8 GB), small fits 3 GB: 1 + 5 * b/32 <= 3 -> b <= 12.8 -> 8.
    d = decide_pair(m, "big", None, 1000.0, "small", 50.0)
    assert d is not None and d.share and (d.sub_batch, d.accumulation) == (8, 4)
    assert d.guest_slowdown_alone > 1.0
    # Nothing fits beside a host using 10.5 GB of 11: the guest must wait.
    m2 = SharingModel(
        profiles={
            "big": SharingProfile(batch=64, memory_gb=10.5, fixed_memory_gb=10.0),
            "small": SharingProfile(batch=32, memory_gb=6.0, fixed_memory_gb=1.0),
        },
        gpu_memory_gb=11.0,
    )
    assert decide_pair(m2, "big", None, 1000.0, "small", 50.0) is None


def test_high_interference_on_a_nearly_done_host_means_wait() -> None:
    m = SharingModel(default=SharingProfile(interference=3.0))
    d = decide_pair(m, "a", None, 10.0, "b", 1000.0)
    assert d is not None and not d.share and d.sequential.average < d.shared.average
    ffs = decide_pair(m, "a", None, 10.0, "b", 1000.0, first_fit=True)
    assert ffs is not None and ffs.share  # first fit shares whatever it costs


def test_pair_ratios_override_and_read_both_ways() -> None:
    m = SharingModel(pairs={("vgg16", "resnet50"): (2.0, 1.25)})
    assert m.interference("VGG16", "resnet50") == (2.0, 1.25)
    assert m.interference("resnet50", "vgg16") == (1.25, 2.0)
    assert m.interference("x", "y") == (1.5, 1.5)


def test_bad_profiles_are_refused() -> None:
    with pytest.raises(ConfigError, match="interference"):
        SharingProfile(interference=0.5)
    with pytest.raises(ConfigError, match="fixed_memory_gb"):
        SharingProfile(memory_gb=2.0, fixed_memory_gb=3.0)
