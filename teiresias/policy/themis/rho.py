"""Finish-time fairness rho = T_shared / T_independent (Themis §3.2, §4.3.1 Equation 1), per app.

Everything is computed from one snapshot (no history), so rho is recomputed
every round from the jobs' own counters:

- work left W: sum over the app's jobs of GPUs x remaining consolidated
  seconds. The simulator knows each job's duration (``Job.remaining_time``);
  live, ``Job.measured_left`` when the controller measured it (tsbatch
  --iterations and the hooks' step times), else the remaining time is
  estimated as the time the job has already run, at least
  ``min_remaining`` seconds (half-way is the memoryless guess; docs/themis.md).
- total work: W plus the GPU-seconds the app's jobs already ran.
- T_independent = S_best x max(total work / min(G / N, D), P): the app alone
  on its 1/N share of the G usable GPUs (N apps with work), with linear
  speedup up to its demand D (GPUs of its unfinished jobs), at the slowdown
  S_best of the best placement of its jobs; and never before its slowest job
  could end: P = max over its jobs of (submission - the app's first
  submission + the job's whole run time).
- T_shared(k) = elapsed + S(k) x max(W / min(k, D), L) with k GPUs: elapsed
  is now minus the app's first submission among its unfinished jobs
  (queueing included); S(k) the slowdown of the app's first jobs that fit in
  k GPUs; L the longest remaining run time of one of its jobs.
  With no GPUs (k = 0) the app is assumed to wait one lease and then get its
  fair share: elapsed + lease + S_best x max(W / min(G / N, D), L).

Why P and L: a job runs on its own GPUs, so an app's finish time is at least
its slowest job's (the paper's T_sh is "determined by the job that finishes
last", §4.3.2, Equation 2's max_j; "the time when the last job finishes" in the
§4.3.3 example, each job's speed-up capped by its demand). With W / k alone,
an app whose one long 1-GPU job runs kept rho = that job's length / (its
GPU-time / share) for as long as it ran, stayed among the 1 - f apps
farthest from fair, and shut apps that had waited for hours out of the
auction (docs/themis.md); the reported rho (simulator/metrics.py) already
counted the slowest job.

Slowdown S of a job's placement (Themis footnote 3): 1 on one node, 1.1
across nodes of one rack (switch), 1.3 across racks; an app's S is the
GPU-weighted mean over its jobs. A job whose skew the profiler measured
scales the paper's excess over 1 by skew / SKEW_REF (``skew_slowdowns``;
docs/themis.md says why).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from teiresias.domain import Cluster, Job, Placement

SLOWDOWNS = (1.0, 1.1, 1.3)  # same node, same rack, across racks (Themis footnote 3)
# The skew at which a job slows by exactly the paper's values: the default
# PACKLIMIT, the point where profile placement stops consolidating because
# spreading stops being cheap (Tiresias §3.3.2).
SKEW_REF = 0.5


def skew_slowdowns(base: tuple[float, float, float], skew: float | None) -> tuple[float, float, float]:
    """Slowdowns of one job: ``base``'s excess over 1 times skew / SKEW_REF; ``base`` when skew is unknown.

    Communication cost across nodes grows with the largest tensor's share of
    the traffic (Tiresias §3.3.2), so a low-skew job barely slows when spread
    and a job of skew 1 (VGG-like) slows twice the paper's excess (1.2 / 1.6,
    near Tiresias' measured 1.67x).
    """
    if skew is None or not math.isfinite(skew):
        return base
    scale = min(max(skew, 0.0), 1.0) / SKEW_REF
    return (base[0], 1.0 + (base[1] - 1.0) * scale, 1.0 + (base[2] - 1.0) * scale)


@dataclass(frozen=True)
class Topology:
    """What slowdowns depend on: the largest node and the largest rack, in GPUs."""

    node_gpus: int
    rack_gpus: int
    slowdowns: tuple[float, float, float] = SLOWDOWNS

    @classmethod
    def of(cls, cluster: Cluster, slowdowns: tuple[float, float, float] = SLOWDOWNS) -> Topology:
        racks = [sum(n.gpus for n in ns) for ns in cluster.switches().values()]
        return cls(cluster.max_gpus_per_node, max(racks, default=0), slowdowns)

    def best(self, gpus: int, skew: float | None = None) -> float:
        """Slowdown of the best placement of a job of ``gpus`` GPUs (and ``skew``, when known)."""
        s = skew_slowdowns(self.slowdowns, skew)
        if gpus <= self.node_gpus:
            return s[0]
        if gpus <= self.rack_gpus:
            return s[1]
        return s[2]

    def of_placement(self, placement: Placement, cluster: Cluster, skew: float | None = None) -> float:
        """Slowdown of an actual placement: one node, one rack, or several racks."""
        s = skew_slowdowns(self.slowdowns, skew)
        if placement.num_nodes <= 1:
            return s[0]
        racks = {cluster.node(n).switch if n in cluster else n for n in placement.nodes}
        return s[1] if len(racks) == 1 else s[2]


@dataclass(frozen=True)
class AppRho:
    """One app's inputs to Equation 1 at one round; ``rho(k)`` is its bid for k GPUs."""

    name: str
    elapsed: float
    work_left: float  # GPU-seconds
    total_work: float  # GPU-seconds
    demand: int  # GPUs of its unfinished jobs
    share: float  # G / N
    lease: float
    s_best: float
    t_id: float
    longest_left: float = 0.0  # the longest remaining run time of one of its jobs, s (L)
    # Prefix levels of the app's jobs in its own order: (GPUs, slowdown) of its first m jobs.
    levels: tuple[tuple[int, float], ...] = ()

    def t_shared(self, gpus: float, slowdown: float) -> float:
        if self.work_left <= 0:
            return self.elapsed
        if gpus <= 0:
            spread = self.work_left / min(self.share, self.demand)
            return self.elapsed + self.lease + self.s_best * max(spread, self.longest_left)
        return self.elapsed + slowdown * max(self.work_left / min(gpus, self.demand), self.longest_left)

    def rho(self, gpus: float, slowdown: float = 1.0) -> float:
        return self.t_shared(gpus, slowdown) / self.t_id if self.t_id > 0 else 1.0


def remaining(job: Job, min_remaining: float) -> float:
    """Consolidated seconds left: the oracle's where known, else the measured, else as long again as it ran."""
    r = job.remaining_time
    if r is not None:
        return r
    if job.measured_left is not None:
        return job.measured_left
    return max(job.total_executed_time, min_remaining)


def app_rho(
    name: str,
    jobs: Sequence[Job],
    now: float,
    share: float,
    lease: float,
    topo: Topology,
    min_remaining: float,
) -> AppRho:
    """Equation 1's inputs for one app from its unfinished ``jobs`` (in the app's own order)."""
    work_left = 0.0
    total = 0.0
    demand = 0
    weighted = 0.0
    longest_left = 0.0
    levels: list[tuple[int, float]] = []
    first = min((j.submit_time for j in jobs), default=now)
    path = 0.0  # P: the latest a job of the app could end alone, from its first submission
    for j in jobs:
        g = max(j.num_gpus, 0)
        r = remaining(j, min_remaining)
        work_left += g * r
        total += g * (r + j.total_executed_time)
        longest_left = max(longest_left, r)
        path = max(path, j.submit_time - first + r + j.total_executed_time)
        demand += g
        weighted += g * topo.best(g, j.skew)
        levels.append((demand, weighted / demand if demand else 1.0))
    s_best = weighted / demand if demand else 1.0
    elapsed = max(now - first, 0.0)
    eff = min(share, demand) if demand else share
    t_id = s_best * max(total / eff, path) if eff > 0 else 0.0
    return AppRho(name, elapsed, work_left, total, demand, share, lease, s_best, t_id, longest_left, tuple(levels))


def current_rho(a: AppRho, jobs: Sequence[Job], topo: Topology, cluster: Cluster) -> float:
    """rho under the app's current allocation: the GPUs its running jobs hold, at their placements' slowdown."""
    gpus = 0
    weighted = 0.0
    for j in jobs:
        if j.is_running and j.placement is not None:
            gpus += j.num_gpus
            weighted += j.num_gpus * topo.of_placement(j.placement, cluster, j.skew)
    return a.rho(gpus, weighted / gpus if gpus else 1.0)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n at worst."""
    xs = [v for v in values if math.isfinite(v)]
    if not xs:
        return 1.0
    sq = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * sq) if sq > 0 else 1.0
