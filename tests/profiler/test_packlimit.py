"""PACKLIMIT fitted from history (Tiresias §3.3.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler.packlimit import PlacementOutcome, fit_packlimit, should_consolidate
from teiresias.errors import ConfigError


def spread(skew: float, slowdown: float) -> PlacementOutcome:
    return PlacementOutcome(skew, False, slowdown, 1.0)


def test_default_until_enough_history() -> None:
    fit = fit_packlimit([spread(0.7, 1.5), spread(0.1, 1.0)], default=0.5, min_samples=8)
    assert fit.packlimit == 0.5 and fit.source == "default" and "not enough history" in fit.reason


def test_default_when_history_has_one_kind_only() -> None:
    fit = fit_packlimit([spread(s / 10, 1.0) for s in range(10)], min_samples=4)
    assert fit.source == "default" and "one kind" in fit.reason


def test_consolidated_runs_do_not_count() -> None:
    hist = [PlacementOutcome(0.9, True, 1.0, 1.0)] * 20
    assert fit_packlimit(hist, min_samples=4).source == "default"


def test_threshold_in_the_widest_gap_between_classes() -> None:
    # Table 6-like history: VGG/AlexNet (0.61-0.77) slow down when spread;
    # ResNet/Inception/GoogleNet (0.04-0.15) do not.
    hist = [spread(s, 1.6) for s in (0.61, 0.715, 0.743, 0.773)]
    hist += [spread(s, 1.02) for s in (0.039, 0.053, 0.092, 0.036, 0.086, 0.146)]
    fit = fit_packlimit(hist, min_samples=8)
    assert fit.source == "history" and fit.misclassified == 0
    assert fit.packlimit == pytest.approx((0.146 + 0.61) / 2)
    assert should_consolidate(0.743, fit.packlimit) and not should_consolidate(0.092, fit.packlimit)


def test_noisy_history_minimises_errors() -> None:
    hist = [spread(s / 20, 1.5 if s / 20 > 0.3 else 1.0) for s in range(20)]
    hist.append(spread(0.05, 1.4))  # one odd job (noisy neighbour)
    fit = fit_packlimit(hist, min_samples=8)
    assert fit.misclassified == 1
    assert 0.3 <= fit.packlimit < 0.35


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0.5, 3.0)), min_size=8, max_size=40))
def test_fit_is_within_bounds_and_no_worse_than_default(pts) -> None:
    hist = [spread(s, d) for s, d in pts]
    fit = fit_packlimit(hist, min_samples=8)
    assert 0.0 <= fit.packlimit <= 1.0
    if fit.source == "history":
        errors_default = sum(1 for s, d in pts if (s > 0.5) != (d > 1.1))
        assert fit.misclassified <= errors_default


def test_unknown_skew_and_bad_config() -> None:
    assert should_consolidate(None, 0.5) is None
    with pytest.raises(ConfigError):
        fit_packlimit([], default=1.5)
    with pytest.raises(ConfigError):
        fit_packlimit([], slowdown=0.9)
