"""PACKLIMIT from job history (Tiresias §3.3.2, "Determining PACKLIMIT").

Tiresias consolidates a job when its skew S_J exceeds PACKLIMIT and otherwise
places it to reduce fragmentation; PACKLIMIT is refitted periodically with a
simple linear classifier on past jobs' placement and performance.

Here the classifier is one-dimensional: a threshold on skew (a decision stump,
the linear classifier in one feature). Each past *spread* run (GPUs on more
than one node) is labelled "suffered" when its iteration time was more than
``slowdown`` times its consolidated baseline; consolidated runs carry no
information about the penalty of spreading and only count as history. The
fitted PACKLIMIT is the threshold with the fewest misclassified spread runs,
placed in the middle of the widest gap between the two classes (max margin),
ties broken towards the configured default. Until there are ``min_samples``
spread runs of both kinds, the configured default is used.

Pure: data in, number out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from teiresias.errors import ConfigError

DEFAULT_PACKLIMIT = 0.5


@dataclass(frozen=True, slots=True)
class PlacementOutcome:
    """One past run: its skew, whether it was consolidated, and its measured
    iteration time next to the consolidated baseline for the same model."""

    skew: float
    consolidated: bool
    iteration_time: float
    baseline_iteration_time: float

    @property
    def slowdown(self) -> float:
        return self.iteration_time / self.baseline_iteration_time


@dataclass(frozen=True, slots=True)
class PackLimitFit:
    packlimit: float
    source: str  # "history" or "default"
    samples: int  # spread runs used
    misclassified: int
    reason: str = ""


def should_consolidate(skew: float | None, packlimit: float) -> bool | None:
    """Tiresias §3.3.2: consolidate iff S_J > PACKLIMIT; None when the skew is unknown."""
    if skew is None:
        return None
    return skew > packlimit


def fit_packlimit(
    history: Iterable[PlacementOutcome],
    *,
    default: float = DEFAULT_PACKLIMIT,
    min_samples: int = 8,
    slowdown: float = 1.1,
) -> PackLimitFit:
    """Fit PACKLIMIT on past runs (see module docstring)."""
    if not 0.0 <= default <= 1.0:
        raise ConfigError(f"default PACKLIMIT must be in [0, 1], got {default}")
    if slowdown <= 1.0:
        raise ConfigError(f"slowdown threshold must be > 1, got {slowdown}")
    pts: list[tuple[float, bool]] = []
    for o in history:
        if o.consolidated or o.baseline_iteration_time <= 0 or o.iteration_time <= 0:
            continue
        if not 0.0 <= o.skew <= 1.0:
            continue
        pts.append((o.skew, o.slowdown > slowdown))
    n = len(pts)
    pos = sum(1 for _, y in pts if y)
    if n < min_samples or pos == 0 or pos == n:
        why = f"{n} spread runs (< {min_samples})" if n < min_samples else "spread runs all of one kind"
        return PackLimitFit(default, "default", n, 0, f"not enough history: {why}")
    pts.sort()
    skews = sorted({s for s, _ in pts})
    # Candidate thresholds: below all, between neighbours, above all.
    cands = [(0.0, skews[0])] + list(zip(skews, skews[1:])) + [(skews[-1], 1.0)]
    best: tuple[int, float, float, float] | None = None
    for lo, hi in cands:
        t = (lo + hi) / 2.0
        errors = sum(1 for s, y in pts if (s > t) != y)
        key = (errors, -(hi - lo), abs(t - default), t)
        if best is None or key < best:
            best = key
    assert best is not None
    errors, _, _, t = best
    return PackLimitFit(round(t, 6), "history", n, errors)
