"""Workload generators writing Tiresias-format traces (Tiresias §5.1, Table 3).

The full Microsoft (Philly) trace and the paper's 480-job testbed trace are
not public, so workloads are generated from what is published:

- :func:`testbed_mix`: §5.1's testbed workload: 480 jobs (240x1, 40x2, 80x4,
  90x8, 25x16, 5x32 GPUs), 48 jobs of each Table 6 model, training time
  between 2 min and 2 h, Poisson arrivals with a 30 s mean gap. The paper
  says durations "follow the distributions of the real trace" without giving
  them; we honour Table 3's bins instead: a job is *short* (< 800 s, the
  scaled-down cut of §5.1) with probability 63.5/76 if small (<= 4 GPUs) and
  16.5/24 if large, and its duration is log-uniform inside its bin
  ([2 min, 800 s) or [800 s, 2 h]).
- :func:`philly_like`: any number of jobs whose GPU-time (GPU-seconds) is
  drawn from a samples file such as the reference simulator's
  ``yarn-gput*.csv`` (Philly), GPU counts from the testbed proportions (which
  follow the real trace) unless given, Poisson arrivals whose rate is either
  given or chosen so the offered load (GPU-seconds asked per second over the
  cluster's GPUs) hits a target.

Everything is drawn from one ``numpy.random.Generator`` seeded by ``seed``:
same arguments, same trace, byte for byte.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from teiresias.errors import ConfigError
from teiresias.simulator.trace import TraceJob

# Table 6 models, and a per-iteration time (s) per model, taken as the median
# duration/iterations of each model in the reference simulator's 60-job
# trace; only used to fill the ``iterations`` column plausibly.
MODELS: tuple[str, ...] = (
    "vgg19",
    "vgg16",
    "vgg11",
    "alexnet",
    "resnet152",
    "resnet101",
    "resnet50",
    "inception4",
    "inception3",
    "googlenet",
)
ITERATION_SECONDS: dict[str, float] = {
    "vgg19": 0.57,
    "vgg16": 0.55,
    "vgg11": 0.51,
    "alexnet": 0.21,
    "resnet152": 0.53,
    "resnet101": 0.38,
    "resnet50": 0.24,
    "inception4": 0.66,
    "inception3": 0.35,
    "googlenet": 0.14,
}
# §5.1: "240 single-GPU jobs; 40 2-GPU, 80 4-GPU, 90 8-GPU, 25 16-GPU, 5 32-GPU".
TESTBED_GPU_MIX: dict[int, int] = {1: 240, 2: 40, 4: 80, 8: 90, 16: 25, 32: 5}
SHORT_CUT = 800.0  # §5.1: after scaling down, a job is short if it trains < 800 s


@dataclass(frozen=True)
class PhillyParams:
    """Knobs of :func:`philly_like` (see its docstring)."""

    num_jobs: int
    cluster_gpus: int
    load: float | None = 0.9
    arrival_rate: float | None = None  # jobs per second; overrides ``load``
    gpu_mix: dict[int, float] | None = None  # GPUs -> weight; default TESTBED_GPU_MIX
    min_duration: float = 60.0
    # The samples' tail (5.3e7 GPU-s) would otherwise make single 1-GPU jobs
    # run for years of simulated time and the offered load of a finite trace
    # meaningless; a week is our cap (None: no cap).
    max_duration: float | None = 7 * 86400.0
    max_gpus: int | None = None  # drop GPU sizes above this (e.g. a small cluster)


def _finish(gpus: Sequence[int], durations: Sequence[float], models: Sequence[str], gaps: np.ndarray) -> list[TraceJob]:
    submits = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    jobs = []
    for i, (g, d, m, t, gap) in enumerate(zip(gpus, durations, models, submits, gaps)):
        d = float(round(d))
        # Whole seconds, like the reference traces.
        t = float(round(t))
        jobs.append(
            TraceJob(
                job_id=i,
                num_gpus=int(g),
                submit_time=t,
                duration=max(d, 1.0),
                model_name=m,
                iterations=max(1, int(round(d / ITERATION_SECONDS[m]))),
                interval=float(round(gap)),
            )
        )
    return jobs


def testbed_mix(
    seed: int = 0,
    mean_interarrival: float = 30.0,
    min_duration: float = 120.0,
    max_duration: float = 7200.0,
    max_gpus: int | None = None,
) -> list[TraceJob]:
    """The 480-job testbed workload of Tiresias §5.1 (see module docstring).

    ``max_gpus``: the GPUs of the cluster it is meant for. Larger jobs (16 and
    32 GPUs on the paper's 60-GPU testbed) ask for that many instead, so the
    trace runs there; every other draw is unchanged (same seed, same jobs).
    """
    if max_gpus is not None and max_gpus < 1:
        raise ConfigError(f"the cluster must have GPUs, got {max_gpus}")
    if not 0 < min_duration <= max_duration:
        raise ConfigError(f"durations must satisfy 0 < min ({min_duration}) <= max ({max_duration})")
    if mean_interarrival <= 0:
        raise ConfigError(f"mean inter-arrival must be > 0 seconds, got {mean_interarrival}")
    rng = np.random.default_rng(seed)
    gpus = np.array([g for g, k in TESTBED_GPU_MIX.items() for _ in range(k)])
    rng.shuffle(gpus)
    models = np.array([m for m in MODELS for _ in range(480 // len(MODELS))])
    rng.shuffle(models)
    # Table 3: P(short | small) = 63.5 / (63.5 + 12.5), P(short | large) = 16.5 / (16.5 + 7.5).
    cut = min(max(SHORT_CUT, min_duration), max_duration)
    p_short = np.where(gpus <= 4, 63.5 / 76.0, 16.5 / 24.0)
    short = rng.random(480) < p_short
    lo = np.where(short, min_duration, cut)
    hi = np.where(short, cut, max_duration)
    durations = np.exp(rng.uniform(np.log(lo), np.log(hi)))
    gaps = rng.exponential(mean_interarrival, size=480)
    if max_gpus is not None:
        # After every draw, so the capped trace differs from the uncapped one only here.
        gpus = np.minimum(gpus, max_gpus)
    return _finish(gpus.tolist(), durations.tolist(), models.tolist(), gaps)


def philly_like(samples: Sequence[float], params: PhillyParams, seed: int = 0) -> list[TraceJob]:
    """A Philly-like trace: GPU-time from ``samples``, Poisson arrivals at a target load.

    Duration = max(GPU-time / GPUs, min_duration), capped at ``max_duration``.
    With ``load`` L the arrival rate is ``L * cluster_gpus / mean GPU-time``
    of the jobs actually drawn, so the offered load is L by construction.
    """
    p = params
    if p.num_jobs <= 0:
        raise ConfigError(f"number of jobs must be > 0, got {p.num_jobs}")
    if p.cluster_gpus <= 0:
        raise ConfigError(f"cluster must have GPUs, got {p.cluster_gpus}")
    if p.arrival_rate is None and (p.load is None or p.load <= 0):
        raise ConfigError("give a target load > 0 (e.g. --load 0.9) or an arrival rate > 0 jobs/s")
    if p.arrival_rate is not None and p.arrival_rate <= 0:
        raise ConfigError(f"arrival rate must be > 0 jobs/s, got {p.arrival_rate}")
    if p.max_duration is not None and p.max_duration < p.min_duration:
        raise ConfigError(f"max duration {p.max_duration} is below min duration {p.min_duration}")
    sizes, weights = _mix(samples, p.gpu_mix, p.max_gpus, p.cluster_gpus)
    rng = np.random.default_rng(seed)
    gpus = rng.choice(sizes, size=p.num_jobs, p=weights)
    gput = rng.choice(np.asarray(samples, dtype=float), size=p.num_jobs, replace=True)
    durations = np.maximum(gput / gpus, p.min_duration)
    if p.max_duration is not None:
        durations = np.minimum(durations, p.max_duration)
    models = rng.choice(np.array(MODELS), size=p.num_jobs)
    if p.arrival_rate is not None:
        rate = p.arrival_rate
    else:
        assert p.load is not None  # checked above: without an arrival rate a load > 0 is required
        rate = p.load * p.cluster_gpus / float(np.mean(durations * gpus))
    gaps = rng.exponential(1.0 / rate, size=p.num_jobs)
    return _finish(gpus.tolist(), durations.tolist(), models.tolist(), gaps)


def _mix(
    samples: Sequence[float], gpu_mix: dict[int, float] | None, max_gpus: int | None, cluster_gpus: int
) -> tuple[np.ndarray, np.ndarray]:
    """The GPU sizes that fit and their probabilities (``gpu_mix`` or the testbed's); checks the samples."""
    if not len(samples):
        raise ConfigError("the GPU-time samples are empty")
    mix = dict(gpu_mix or TESTBED_GPU_MIX)
    limit = min(max_gpus or cluster_gpus, cluster_gpus)
    mix = {g: w for g, w in mix.items() if 0 < g <= limit and w > 0}
    if not mix:
        raise ConfigError(f"no GPU size in the mix fits a {limit}-GPU limit")
    sizes = np.array(sorted(mix))
    weights = np.array([mix[g] for g in sizes], dtype=float)
    return sizes, weights / weights.sum()


def parse_gpu_mix(text: str) -> dict[int, float]:
    """``"1:240,2:40,4:80"`` -> {1: 240.0, 2: 40.0, 4: 80.0} (weights, any scale)."""
    out: dict[int, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            g, w = part.split(":")
            gi, wf = int(g), float(w)
        except ValueError:
            raise ConfigError(f"bad GPU mix entry {part!r}; write GPUS:WEIGHT pairs, e.g. 1:240,2:40,4:80") from None
        if gi <= 0 or wf < 0:
            raise ConfigError(f"bad GPU mix entry {part!r}; GPUS must be > 0 and WEIGHT >= 0")
        out[gi] = wf
    if not out:
        raise ConfigError("empty GPU mix; write GPUS:WEIGHT pairs, e.g. 1:240,2:40,4:80")
    return out


def with_apps(jobs: Sequence[TraceJob], num_apps: int, seed: int = 0) -> list[TraceJob]:
    """The same jobs grouped into ``num_apps`` Themis apps (``app`` column ``app0``.. in order of
    arrival): public traces name none. An app is a hyper-parameter search whose trials are
    submitted together (Themis §2.2, §6.1: apps arrive over time, each with its jobs), so each app
    is a run of consecutive submissions; the runs' lengths are a uniformly random composition of
    the jobs (seeded: same jobs and seed, same apps), so a few apps are large and many small.

    Why not jobs drawn from apps all through the trace, as this first did: an app then spans
    the whole trace, its finish time is its last submission plus that job's length under any
    policy, and every app's finish-time fairness sits at 1 (docs/themis.md)."""
    if num_apps < 1:
        raise ValueError("num_apps must be >= 1")
    ordered = sorted(jobs, key=lambda j: j.submit_time)
    n = min(num_apps, len(ordered))
    rng = random.Random(seed * 7919 + num_apps)
    bounds = [0, *sorted(rng.sample(range(1, len(ordered)), n - 1)), len(ordered)] if ordered else [0]
    out: list[TraceJob] = []
    for a in range(len(bounds) - 1):
        out.extend(replace(j, app=f"app{a}") for j in ordered[bounds[a] : bounds[a + 1]])
    return out


@dataclass(frozen=True)
class TeamsParams:
    """Knobs of :func:`teams_like` (see its docstring)."""

    num_jobs: int
    cluster_gpus: int
    load: float
    num_teams: int = 1
    gpu_mix: dict[int, float] | None = None  # the site's mix each team skews; default TESTBED_GPU_MIX
    # How far a team's GPU sizes stray from the site's mix: the Dirichlet concentration per
    # unit of the site's weights (large: every team asks like the site; small: a few sizes each).
    mix_concentration: float = 4.0
    # A team's GPU-time scale is exp(N(0, sigma)) times the site's samples: teams of long and of
    # short jobs, so a team's distribution is not the history's.
    scale_sigma: float = 0.7
    burst_mean: float = 8.0  # mean jobs per submission burst (a sweep), geometric
    burst_gap: float = 30.0  # mean seconds between two jobs of a burst
    sweep_sigma: float = 0.5  # a burst's jobs: the burst's GPU-time times exp(N(0, sigma))
    # Gaps between a team's bursts are exp(N(0, sigma)) scaled to the span: 0 spaces them
    # evenly, larger values cluster them into busy stretches and quiet ones.
    cluster_sigma: float = 1.0
    min_duration: float = 60.0
    max_duration: float | None = 86400.0
    max_gpus: int | None = None


def teams_like(samples: Sequence[float], params: TeamsParams, seed: int = 0) -> list[TraceJob]:
    """Philly-like jobs from ``num_teams`` teams, merged: what one site's queue looks like.

    A public trace is one site's jobs, and one site is many teams (Philly's
    virtual clusters), each unlike the site as a whole: its own GPU sizes (a
    Dirichlet draw around the site's mix), its own job lengths (the site's
    GPU-time samples times a team scale), and submissions in bursts (a
    hyper-parameter sweep: one size, similar lengths, a minute or so apart).
    Teams get a Dirichlet share of the jobs; bursts arrive uniformly over the
    span that makes the offered load ``load`` (GPU-seconds asked per second
    over the cluster's GPUs), so arrivals are Poisson in bursts. With one team
    this is one team's trace. Job ids follow submit order; the team is the
    ``account`` column (``team0``, ...).
    """
    p = params
    if p.num_jobs <= 0 or p.num_teams <= 0:
        raise ConfigError(f"need > 0 jobs and teams, got {p.num_jobs} jobs, {p.num_teams} teams")
    if p.cluster_gpus <= 0:
        raise ConfigError(f"cluster must have GPUs, got {p.cluster_gpus}")
    if p.load <= 0:
        raise ConfigError(f"give a target load > 0, got {p.load}")
    if p.burst_mean < 1:
        raise ConfigError(f"mean burst size must be >= 1 job, got {p.burst_mean}")
    sizes, base = _mix(samples, p.gpu_mix, p.max_gpus, p.cluster_gpus)
    rng = np.random.default_rng(seed)
    pool = np.asarray(samples, dtype=float)
    shares = rng.dirichlet(np.ones(p.num_teams)) if p.num_teams > 1 else np.ones(1)
    counts = np.floor(shares * p.num_jobs).astype(int)
    counts[np.argsort(-shares)[: p.num_jobs - int(counts.sum())]] += 1
    # (team, burst, gpus, GPU-time, offset within the burst) per job
    rows: list[tuple[int, int, int, float, float]] = []
    for team, n in enumerate(counts.tolist()):
        weights = rng.dirichlet(base * p.mix_concentration * len(base))
        scale = float(np.exp(rng.normal(0.0, p.scale_sigma))) if p.scale_sigma > 0 else 1.0
        burst, made = 0, 0
        while made < n:
            k = min(n - made, int(rng.geometric(1.0 / p.burst_mean)))
            g = int(rng.choice(sizes, p=weights))
            centre = float(rng.choice(pool)) * scale
            jitter = np.exp(rng.normal(0.0, p.sweep_sigma, size=k)) if p.sweep_sigma > 0 else np.ones(k)
            offsets = np.concatenate(([0.0], np.cumsum(rng.exponential(p.burst_gap, size=k - 1))))
            rows.extend((team, burst, g, centre * float(x), float(o)) for x, o in zip(jitter, offsets))
            burst, made = burst + 1, made + k
    gpus = np.array([r[2] for r in rows])
    durations = np.maximum(np.array([r[3] for r in rows]) / gpus, p.min_duration)
    if p.max_duration is not None:
        durations = np.minimum(durations, p.max_duration)
    span = float(np.sum(durations * gpus)) / (p.load * p.cluster_gpus)
    starts: dict[tuple[int, int], float] = {}
    for team in range(len(counts)):
        n_bursts = 1 + max((r[1] for r in rows if r[0] == team), default=-1)
        if not n_bursts:
            continue
        gaps_b = np.exp(rng.normal(0.0, p.cluster_sigma, size=n_bursts))
        at = np.cumsum(gaps_b) - gaps_b[0] * float(rng.uniform())
        at = at / max(float(at[-1]), 1e-9) * span * float(rng.uniform(0.9, 1.0))
        for b in range(n_bursts):
            starts[(team, b)] = float(at[b])
    submits = np.array([starts[(r[0], r[1])] + r[4] for r in rows])
    models = rng.choice(np.array(MODELS), size=len(rows))
    order = np.argsort(submits, kind="stable")
    t = np.round(submits[order])
    gaps = np.diff(np.concatenate((t - t[0], [t[-1] - t[0]])))
    jobs = _finish(gpus[order].tolist(), durations[order].tolist(), models[order].tolist(), gaps)
    return [replace(j, account=f"team{rows[i][0]}") for j, i in zip(jobs, order.tolist())]


# The limits users pick: Slurm limits come in a few round values (Tsafrir, Etsion and Feitelson,
# "Modeling User Runtime Estimates", JSSPP 2005: a handful of round values cover most jobs).
COMMON_LIMITS: tuple[float, ...] = tuple(
    h * 3600.0 for h in (1, 2, 4, 8, 12, 24, 48, 72, 168)
)  # 1 h, 2 h, 4 h, 8 h, 12 h, 1 d, 2 d, 3 d, 7 d
TIME_LIMIT_MODELS = ("none", "max", "exact", "round", "user")


@dataclass(frozen=True)
class LimitParams:
    """Knobs of :func:`with_time_limits` (see its docstring)."""

    model: str = "user"
    max_limit: float = 7 * 86400.0  # the partition's MaxTime, seconds
    at_max: float = 0.2  # ``user``: the share of jobs at the maximum (no --time given, or "just in case")
    min_accuracy: float = 0.05  # ``user``: run time / estimate is uniform on [min_accuracy, 1]


def with_time_limits(jobs: Sequence[TraceJob], params: LimitParams, seed: int = 0) -> list[TraceJob]:
    """The same jobs with a ``time_limit`` each, as Slurm users would declare them.

    Models (``TIME_LIMIT_MODELS``):

    - ``none``: no limit (the column stays empty).
    - ``max``: every job at the partition's maximum: limits that say nothing.
    - ``exact``: the run time itself, rounded up to a minute (Slurm's unit): a
      perfect estimate, the bound of what limits can tell.
    - ``round``: the smallest common limit (``COMMON_LIMITS``, 1 h to 7 d) at
      or above the run time: honest users who round up.
    - ``user``: what studies of real estimates report. Estimates are poor and
      mostly over-estimates: the accuracy (run time / estimate) is roughly
      uniform on (0, 1] (Mu'alem and Feitelson, IEEE TPDS 12(6), 2001), so the
      estimate is the run time over a uniform draw on [``min_accuracy``, 1];
      estimates are modal, a few round values, the maximum allowed being among
      the most popular (Tsafrir, Etsion and Feitelson, JSSPP 2005), so it is
      rounded up to a common limit, and a share ``at_max`` of jobs sits at
      the maximum whatever their run time.

    Limits above ``max_limit`` are ``max_limit``; a job longer than it is an
    error (Slurm would end it there). Seeded separately from the trace: the
    same jobs and seed give the same limits.
    """
    p = params
    if p.model not in TIME_LIMIT_MODELS:
        raise ConfigError(f"time-limit model {p.model!r}: choose one of {', '.join(TIME_LIMIT_MODELS)}")
    if p.max_limit <= 0:
        raise ConfigError(f"the maximum time limit must be > 0 seconds, got {p.max_limit:g}")
    if not 0.0 <= p.at_max <= 1.0:
        raise ConfigError(f"the share of jobs at the maximum limit must be in [0, 1], got {p.at_max:g}")
    if not 0.0 < p.min_accuracy <= 1.0:
        raise ConfigError(f"the lowest estimate accuracy must be in (0, 1], got {p.min_accuracy:g}")
    if p.model == "none":
        return [replace(j, time_limit=None) for j in jobs]
    longest = max((j.duration for j in jobs), default=0.0)
    if longest > p.max_limit:
        raise ConfigError(
            f"a job runs {longest:.0f} s, longer than the maximum time limit {p.max_limit:.0f} s;"
            " raise --max-time-limit or cap the durations (--max-duration)"
        )
    steps = np.array(sorted({*(x for x in COMMON_LIMITS if x < p.max_limit), p.max_limit}))
    rng = np.random.default_rng([seed, 24])
    out = []
    for j in jobs:
        d = j.duration
        if p.model == "max":
            limit = p.max_limit
        elif p.model == "exact":
            limit = min(math.ceil(d / 60.0) * 60.0, p.max_limit)
        else:
            want = d
            if p.model == "user":
                accuracy = rng.uniform(p.min_accuracy, 1.0)
                at_max = rng.random() < p.at_max
                want = p.max_limit if at_max else d / accuracy
            limit = float(steps[min(int(np.searchsorted(steps, want, side="left")), len(steps) - 1)])
        out.append(replace(j, time_limit=max(limit, d)))
    return out
