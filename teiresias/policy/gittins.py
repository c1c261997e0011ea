"""The job-service distribution and the 2D-Gittins index (Tiresias §3.2.2, Pseudocode 1).

A ServiceDistribution holds samples of job total GPU-time (GPU-seconds),
e.g. the reference simulator's ``yarn-gput*.csv`` (one column ``duration``)
or the GPU-times of jobs the live controller saw complete.

The Gittins index of a job with attained service ``a`` and service quantum
``delta`` is (Pseudocode 1, line 11)::

    G(a, delta) = P(S - a <= delta | S > a) / E[min(S - a, delta) | S > a]

With samples sorted as s_0 <= ... <= s_{n-1}, i = #{s <= a}, j = #{s <= a + delta},
m = n - i survivors and c = j - i of them finishing within ``delta``::

    G = c / (sum_{k=i}^{j-1} (s_k - a) + (n - j) * delta)

(the 1/m cancels), so with prefix sums one index costs two binary searches.
The continuous index takes the supremum over delta > 0; between sample points
the numerator is constant and the denominator grows, so the supremum is
reached at some delta = s_k - a and is a maximum over the survivors.

Immutable: ``extended`` returns a new distribution, so a policy holding one
stays pure; the controller swaps in a new one as jobs complete.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from teiresias import yamlconf
from teiresias.errors import TraceError


class ServiceDistribution:
    """Empirical distribution of job GPU-time (GPU-seconds) with fast Gittins indices."""

    __slots__ = ("_s", "_prefix", "_cache", "_sup_cache", "_np", "_np_prefix", "_grids")

    def __init__(self, samples: Iterable[float]) -> None:
        s = sorted(float(x) for x in samples)
        if not s:
            raise TraceError("a service distribution needs at least one GPU-time sample")
        # 0 is allowed: a job the controller saw finish at once took no GPU-time;
        # such a sample never survives any attained service, so it is harmless.
        bad = next((x for x in s if not math.isfinite(x) or x < 0), None)
        if bad is not None:
            raise TraceError(f"GPU-time sample {bad} is not a non-negative finite number")
        self._s = s
        prefix = [0.0]
        for x in s:
            prefix.append(prefix[-1] + x)
        self._prefix = prefix
        self._cache: dict[tuple[float, float], float] = {}
        self._sup_cache: dict[float, float] = {}
        self._np: np.ndarray | None = None
        self._np_prefix: np.ndarray | None = None
        self._grids: dict[int, np.ndarray] = {}

    # -- construction -------------------------------------------------------
    @classmethod
    def from_values(cls, values: Iterable[float]) -> ServiceDistribution:
        return cls(values)

    @classmethod
    def from_samples_file(cls, path: str | Path) -> ServiceDistribution:
        """Read a one-column CSV with header ``duration`` (GPU-seconds per job).

        Raises TraceError naming the file and line of the first bad value.
        """
        p = Path(path)
        fh = io.StringIO(yamlconf.read_text(p, "GPU-time samples", TraceError), newline="")
        with fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{p}: empty file; expected a header 'duration' and one GPU-time per line")
            names = [h.strip() for h in header]
            if "duration" not in names:
                raise TraceError(f"{p}:1: no 'duration' column (found {', '.join(names) or 'nothing'})")
            col = names.index("duration")
            values: list[float] = []
            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                raw = row[col].strip() if col < len(row) else ""
                try:
                    v = float(raw)
                except ValueError:
                    raise TraceError(f"{p}:{line}: duration {raw!r} is not a number") from None
                if not math.isfinite(v) or v <= 0:
                    raise TraceError(f"{p}:{line}: duration {raw!r} must be a positive number of GPU-seconds")
                values.append(v)
        if not values:
            raise TraceError(f"{p}: no GPU-time samples after the header")
        return cls(values)

    def extended(self, values: Iterable[float]) -> ServiceDistribution:
        """A new distribution with more samples (e.g. GPU-times of jobs that just completed)."""
        return ServiceDistribution([*self._s, *values])

    # -- queries ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._s)

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(self._s)

    def mean(self) -> float:
        return self._prefix[-1] / len(self._s)

    def mean_residual(self, attained: float) -> float:
        """E[S - a | S > a], the expected GPU-time still to come of a job that has had
        ``attained``; 0 past every sample. Two prefix sums (SJF-BSBF's job length, live)."""
        s, pre, n = self._s, self._prefix, len(self._s)
        i = bisect.bisect_right(s, attained)
        if i == n:
            return 0.0
        return (pre[n] - pre[i]) / (n - i) - attained

    def index(self, attained: float, delta: float | None = None) -> float:
        """Gittins index G(attained, delta) of Pseudocode 1 (Tiresias §3.2.2).

        ``delta=None`` takes the supremum over delta > 0 (continuous 2D-Gittins);
        ``delta=math.inf`` is 1 / E[S - a | S > a]. A job that has outlived every
        sample gets 0 (lowest priority: the distribution says nothing about it).
        """
        if delta is None:
            return self._sup_index(attained)
        key = (attained, delta)
        got = self._cache.get(key)
        if got is None:
            got = self._index(attained, delta)
            if len(self._cache) > 200_000:
                self._cache.clear()  # bound memory on very long replays
            self._cache[key] = got
        return got

    def indices(
        self, attained: Sequence[float], deltas: Sequence[float], bounds: Sequence[float] | np.ndarray | None = None
    ) -> np.ndarray:
        """``index(a, delta)`` for many jobs at once (vectorized; same arithmetic).

        Used by the policy every round for every job outside the last queue.
        ``bounds``: each job's largest possible GPU-time (its time limit times
        its GPUs; inf: none): the distribution is truncated there (``_bounded``).
        """
        s, pre = self._arrays()
        a = np.asarray(attained, dtype=float)
        d = np.asarray(deltas, dtype=float)
        i = np.searchsorted(s, a, side="right")
        n = self._ends(bounds, len(a))
        finite = np.isfinite(d)
        j = np.where(finite, np.searchsorted(s, a + np.where(finite, d, 0.0), side="right"), n)
        j = np.minimum(j, n)
        c = j - i
        tail = np.where(finite, (n - j) * np.where(finite, d, 0.0), 0.0)
        denom = pre[j] - pre[i] - c * a + tail
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where((i < n) & (denom > 0), c / denom, 0.0)
        if bounds is not None:
            g = _bounded(g, i < n, a, d, bounds, index=True)
        return g

    def finish_probabilities(
        self, attained: Sequence[float], deltas: Sequence[float], bounds: Sequence[float] | np.ndarray | None = None
    ) -> np.ndarray:
        """P(S - a <= delta | S > a) for many jobs: the numerator of ``indices`` (so that
        index = probability / expected GPU-time spent within the quantum); 0 past every sample.
        ``bounds`` as in ``indices``."""
        s, _ = self._arrays()
        a = np.asarray(attained, dtype=float)
        d = np.asarray(deltas, dtype=float)
        i = np.searchsorted(s, a, side="right")
        n = self._ends(bounds, len(a))
        finite = np.isfinite(d)
        j = np.where(finite, np.searchsorted(s, a + np.where(finite, d, 0.0), side="right"), n)
        j = np.minimum(j, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(i < n, (j - i) / np.maximum(n - i, 1), 0.0)
        if bounds is not None:
            p = _bounded(p, i < n, a, d, bounds, index=False)
        return p

    def residual_indices(
        self, attained: Sequence[float], points: int | None = None, bounds: Sequence[float] | np.ndarray | None = None
    ) -> np.ndarray:
        """G(a', infinity) = 1 / E[S - a' | S > a'] with a' the largest sample <= a (0 if none).

        ``points``: snap to the samples at the 1/points, 2/points, ... quantiles
        only (the ``points``-quantiles; a' = 0 below the first), so a job re-ranks
        at most ``points - 1`` times in the last queue however many samples there
        are. Each re-ranking of a heavy-tailed (decreasing-hazard) distribution
        lowers the job's index below younger jobs', i.e. preempts it: with
        every one of 5,000 samples a step, a replay at load 4.5 preempted each
        job 35-53 times; with 16 points about twice (docs/benchmarks.md, "Quality").

        The index of the last queue (Delta = infinity) for ``policy.last_queue:
        gittins``. Snapping ``a`` down to a sample point makes the index a step
        function: it is constant while no sample lies between a' and a, so a
        job re-ranks only when its attained service crosses a sample point,
        as in the reference simulator, instead of on every round (between two
        sample points the exact index only grows, so running jobs would churn
        against each other for no information gained). Past the largest sample
        the index is 0 (lowest priority, as ``index``). ``bounds`` as in
        ``indices`` (samples above a job's bound are not its future).
        """
        s, pre = self._arrays()
        a = np.asarray(attained, dtype=float)
        n = self._ends(bounds, len(a))
        if points is not None:
            grid = self._grid(points)
            k = np.searchsorted(grid, a, side="right")
            a = np.where(k > 0, grid[np.maximum(k - 1, 0)], 0.0)
        i = np.searchsorted(s, a, side="right")
        snapped = np.where(i > 0, s[np.maximum(i - 1, 0)], 0.0)
        m = n - i
        denom = pre[n] - pre[i] - m * snapped
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.where((m > 0) & (denom > 0), m / denom, 0.0)
        if bounds is not None:
            g = _bounded(g, m > 0, snapped, np.full(len(a), math.inf), bounds, index=True)
        return g

    def snap_bounds(self, bounds: Sequence[float] | np.ndarray, points: int | None = None) -> np.ndarray:
        """Each bound raised to the next of the samples' ``4 * points``-quantiles (the next
        sample with None), and inf past the last point of the index grid (``residual_indices``'
        ``points``-quantiles).

        Why: a time limit is coarse information, and ``policy.last_queue: gittins``
        ranks on a grid. Snapped bounds keep jobs whose limits the grid cannot tell
        apart tied (their in-queue order decides), and a bound past the grid's last
        point (the samples' far tail: on the Philly samples with 16 points, 69
        GPU-hours; a 7-day limit is past it even on one GPU) truncates nothing, so
        limits at a partition maximum that high rank jobs exactly as no limits do.
        Unsnapped, every job at a 7-day limit lost the samples' tail past its GPUs x
        7 days, gang sizes drew apart and a load-4.5 replay went from 1.28x to 1.52x
        srsf's average JCT; snapped to the 16 points themselves, honest limits
        (rounded up to 1 h, 2 h, ... 7 d) lost resolution (1.16x against 1.11x with
        64 points below the cut; docs/benchmarks.md, "Time limits").
        """
        b = np.asarray(bounds, dtype=float)
        if points is None:
            fine = top = self._arrays()[0]
        else:
            fine, top = self._grid(4 * points), self._grid(points)
        k = np.searchsorted(fine, b, side="left")
        out = np.where(k < len(fine), fine[np.minimum(k, len(fine) - 1)], math.inf)
        return np.where(out > top[-1], math.inf, out)

    def _ends(self, bounds: Sequence[float] | np.ndarray | None, count: int) -> np.ndarray | int:
        """Per job, how many samples lie at or below its bound (all of them without bounds)."""
        n = len(self._s)
        if bounds is None:
            return n
        b = np.asarray(bounds, dtype=float)
        if len(b) != count:
            raise ValueError(f"{len(b)} bounds for {count} jobs")
        s, _ = self._arrays()
        return np.searchsorted(s, b, side="right")

    def residual_changes_at(self, attained: Sequence[float], points: int | None = None) -> np.ndarray:
        """For each attained service, the smallest one above it at which ``residual_indices``
        (same ``points``) may give another value: the next grid point (inf past the last)."""
        s, _ = self._arrays()
        a = np.asarray(attained, dtype=float)
        grid = self._grid(points) if points is not None else s
        k = np.searchsorted(grid, a, side="right")
        return np.where(k < len(grid), grid[np.minimum(k, len(grid) - 1)], math.inf)

    def next_sample_after(self, attained: float) -> float:
        """The smallest sample > ``attained`` (where ``residual_indices`` next changes); inf if none."""
        i = bisect.bisect_right(self._s, attained)
        return self._s[i] if i < len(self._s) else math.inf

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples and their prefix sums as numpy arrays, built on first use."""
        s, pre = self._np, self._np_prefix
        if s is None or pre is None:
            s = self._np = np.asarray(self._s)
            pre = self._np_prefix = np.asarray(self._prefix)
        return s, pre

    def _grid(self, points: int) -> np.ndarray:
        """``residual_indices``' grid: the distinct ``points``-quantiles of the samples, built once."""
        grid = self._grids.get(points)
        if grid is None:
            s, _ = self._arrays()
            grid = self._grids[points] = np.unique(np.quantile(s, np.arange(1, points) / points, method="lower"))
        return grid

    def _index(self, a: float, delta: float) -> float:
        s, pre, n = self._s, self._prefix, len(self._s)
        i = bisect.bisect_right(s, a)
        if i == n:
            return 0.0
        if math.isinf(delta):
            j = n
            denom = pre[n] - pre[i] - (n - i) * a
        else:
            j = bisect.bisect_right(s, a + delta)
            denom = pre[j] - pre[i] - (j - i) * a + (n - j) * delta
        c = j - i
        return c / denom if denom > 0 else 0.0

    def _sup_index(self, a: float) -> float:
        got = self._sup_cache.get(a)
        if got is not None:
            return got
        s, n = self._s, len(self._s)
        i = bisect.bisect_right(s, a)
        if i == n:
            got = 0.0
        else:
            arr, pre = self._arrays()
            # Candidate delta_k = s_k - a for every survivor k >= i; with equal
            # samples only the last of a run matters (it counts them all).
            ks = np.arange(i, n)
            last_of_run = np.append(arr[i + 1 :] != arr[i:-1], True)
            ks = ks[last_of_run]
            j = ks + 1
            deltas = arr[ks] - a
            denom = pre[j] - pre[i] - (j - i) * a + (n - j) * deltas
            ratios = (j - i) / denom
            got = float(ratios.max())
        if len(self._sup_cache) > 200_000:
            self._sup_cache.clear()
        self._sup_cache[a] = got
        return got


def _bounded(
    values: np.ndarray,
    known: np.ndarray,
    a: np.ndarray,
    d: np.ndarray,
    bounds: Sequence[float] | np.ndarray,
    *,
    index: bool,
) -> np.ndarray:
    """Where no sample lies between a job's attained service and its bound (``known`` false),
    the distribution says nothing but the limit still does: the job ends by its bound, so
    take its remaining GPU-time as the worst case, bound - attained (at least 1 GPU-second:
    a job at or past its limit is about to end). As a Gittins index: 1 / remaining when the
    quantum covers it, else 0 (it cannot finish within the quantum); as a finish probability,
    1 or 0."""
    b = np.asarray(bounds, dtype=float)
    left = np.maximum(b - a, 1.0)
    within = left <= d
    fill = np.where(within, 1.0 / left, 0.0) if index else within.astype(float)
    return np.where(known | ~np.isfinite(b), values, fill)
