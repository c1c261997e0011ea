"""Queue thresholds learned from the GPU-time distribution (``policy.queues: auto``, ``--queues auto``).

Tiresias leaves K and the thresholds to the operator (§3.2.3; the paper uses
K = 2 and 1 h). Here they are chosen to minimise the expected JCT that a
queueing model predicts under the site's learned distribution, and refitted
whenever the distribution is (the controller rebuilds its policy as finished
jobs add samples).

The model: one fluid server of GPU-seconds, Poisson arrivals at offered load
``load`` (< 1: the model has no steady state above), job GPU-time S drawn from
the samples, preemptive priority across queues and FIFO inside each
(Kleinrock's multi-level discipline with FCFS at every level). A job of size
x in queue k (a_{k-1} < x <= a_k) then has the mean response time

    T_k(x) = (W(a_k) + x) / (1 - rho(a_{k-1})),
    W(a) = lambda E[min(S, a)^2] / (2 (1 - rho(a))),   rho(a) = lambda E[min(S, a)],

because before it completes the server works off everything present at its
arrival truncated at a_k (those jobs are ahead of it up to a_k), its own x,
and newcomers' work up to a_{k-1} (behind it in its queue, ahead below it);
with one queue this is the M/G/1 FCFS time. The expected JCT is the mean of
T over the samples. Gang sizes, placement and preemption overhead are outside
the model; what it captures is the trade the thresholds make: short jobs get
out of the way of long ones, at the price of long jobs waiting on one
another's FIFO tail. The candidates are the distribution's quantiles
(``grid`` of them); every set of up to ``max_queues - 1`` increasing ones is
scored (cheap: prefix sums make each score O(K)).

Pure: no clock, no I/O; the same distribution gives the same thresholds.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from teiresias.errors import ConfigError
from teiresias.policy.gittins import ServiceDistribution


@dataclass(frozen=True)
class ThresholdFit:
    """The chosen thresholds, the model's expected JCT for them, and for the paper's single 1 h threshold."""

    thresholds: tuple[float, ...]
    expected_jct: float
    paper_expected_jct: float
    load: float
    samples: int


class _Moments:
    """E[min(S, a)] and E[min(S, a)^2] for any a, from prefix sums over the sorted samples."""

    def __init__(self, dist: ServiceDistribution) -> None:
        s = list(dist.samples)
        self.s = s
        self.n = len(s)
        p1, p2 = [0.0], [0.0]
        for x in s:
            p1.append(p1[-1] + x)
            p2.append(p2[-1] + x * x)
        self.p1, self.p2 = p1, p2

    def m1(self, a: float) -> float:
        i = bisect.bisect_right(self.s, a)
        return (self.p1[i] + ((self.n - i) * a if i < self.n else 0.0)) / self.n

    def m2(self, a: float) -> float:
        i = bisect.bisect_right(self.s, a)
        return (self.p2[i] + ((self.n - i) * a * a if i < self.n else 0.0)) / self.n

    def level(self, lo: float, hi: float) -> tuple[float, float]:
        """(P(lo < S <= hi), E[S; lo < S <= hi])."""
        i, j = bisect.bisect_right(self.s, lo), bisect.bisect_right(self.s, hi)
        return (j - i) / self.n, (self.p1[j] - self.p1[i]) / self.n


def expected_jct(dist: ServiceDistribution, thresholds: Sequence[float], load: float = 0.95) -> float:
    """The model's mean JCT (seconds of the fluid server) for ``thresholds`` at offered ``load``."""
    return _score(_Moments(dist), tuple(thresholds), load)


def _score(m: _Moments, thresholds: tuple[float, ...], load: float) -> float:
    lam = load / m.m1(float("inf"))
    bounds = (0.0, *thresholds, float("inf"))
    total = 0.0
    for lo, hi in zip(bounds, bounds[1:]):
        p, mass = m.level(lo, hi)
        if p == 0:
            continue
        rho_hi = lam * m.m1(hi)
        w = lam * m.m2(hi) / (2 * (1 - rho_hi))
        total += (w * p + mass) / (1 - lam * m.m1(lo))
    return total


def fit_thresholds(dist: ServiceDistribution, load: float = 0.95, max_queues: int = 4, grid: int = 40) -> ThresholdFit:
    """The thresholds (K - 1 of them, K <= ``max_queues``) minimising ``expected_jct`` at ``load``.

    Ties go to fewer queues, then lower thresholds (itertools order), so the
    fit is deterministic.
    """
    if not 0 < load < 1:
        raise ConfigError(f"threshold fit: load {load} must be in (0, 1); the queueing model has no steady state above")
    if max_queues < 1:
        raise ConfigError(f"threshold fit: max_queues {max_queues} must be >= 1")
    m = _Moments(dist)
    qs = sorted({m.s[min(m.n - 1, int(m.n * (k + 1) / (grid + 1)))] for k in range(grid)})
    # A threshold at or above the largest sample changes nothing: every job finishes below it.
    qs = [q for q in qs if q < m.s[-1]]
    best: tuple[float, tuple[float, ...]] | None = None
    for k in range(0, max_queues):
        for combo in itertools.combinations(qs, k):
            score = _score(m, combo, load)
            if best is None or score < best[0] - 1e-9 * abs(best[0]):
                best = (score, combo)
    assert best is not None
    chosen = best[1] if best[1] else (m.s[-1],)  # one queue: a threshold nobody reaches
    return ThresholdFit(tuple(float(x) for x in chosen), best[0], _score(m, (3600.0,), load), load, m.n)
