"""What a replay measures (Tiresias §5.1 "Metric", Tables 4-5, Fig. 11/13).

- JCT: completion minus submission.
- Queueing delay: all the time a job spent not holding GPUs, i.e. JCT minus
  the time it held GPUs (initial wait plus waits after preemptions). Without
  preemption this is the classic first-start delay.
- GPU utilisation: allocated GPU-seconds over ``total GPUs x makespan``
  (GPUs held during a restore after preemption count as allocated).
- Makespan: last completion minus first submission.
- Finish-time fairness per app (Themis §3.2, docs/themis.md "Reported rho"):
  rho = T_shared / T_independent, with T_shared the app's last completion
  minus its first submission and T_independent its finish time alone on a
  1/N_avg share of the GPUs (N_avg: average number of apps with work over its
  lifetime), linear speedup up to its demand and no slowdown, and never
  before its last job could end on its own (last submission + duration).
  ``max_rho``, ``jain_rho`` (Jain's index of the rhos) and ``share_rho_le_1``
  (fraction of apps with rho <= 1) summarise them for every policy.
- Gandiva's figures, for every policy (docs/gandiva.md, "Metrics"):
  - time to early feedback: from submission until the job has done its
    first ``feedback`` seconds of work (SimulationOptions.feedback; all of
    it if shorter), Gandiva §4.1's design goal;
  - useful utilisation: work done (GPUs x consolidated alone seconds) over
    total GPUs x makespan; unlike ``gpu_utilization`` (GPUs held) it drops
    while jobs are suspended or slowed and can pass 1 with packing;
  - load: GPUs asked for by all unfinished jobs over the cluster's GPUs,
    time-averaged and at its peak (> 1: overload, §4.1); ``max_height``:
    the highest ceil(allocated / GPUs) of any node (> 1 only when jobs
    time-slice), with the counts of suspensions, migrations, packs,
    unpacks and resizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: int
    gpus: int
    model: str
    submit: float
    start: float  # first start
    end: float
    jct: float
    queue_delay: float
    preemptions: int
    overhead: float  # preemption overhead charged to this job (s)
    slowed: bool  # ran at least once unconsolidated with a slowdown > 1
    nodes: tuple[str, ...]  # nodes of its last placement
    app: str = ""  # its app (teiresias.policy.themis.apps.app_of)
    work: float = 0.0  # run time alone and consolidated (the trace's duration), s
    feedback: float = 0.0  # time to early feedback: submit until its first `feedback` s of work, s
    slices: int = 0  # times suspended for time-slicing (Gandiva)
    migrations: int = 0  # times migrated (Gandiva)


@dataclass(frozen=True)
class GandivaFigures:
    """Replay-wide figures of the module docstring that records cannot give.

    Summary repeats these fields by name, last, so that its JSON stays one flat object.
    """

    avg_load: float = 0.0
    peak_load: float = 0.0
    max_height: int = 0
    suspensions: int = 0
    migrations: int = 0
    packs: int = 0
    unpacks: int = 0
    resizes: int = 0


@dataclass(frozen=True)
class Summary:
    """One policy's figures; ``as_json()`` is the ``--json`` object (times in seconds)."""

    policy: str
    jobs: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    avg_queue_delay: float
    median_queue_delay: float
    p95_queue_delay: float
    makespan: float
    preemptions: int
    preemption_overhead: float
    gpu_utilization: float
    wall_seconds: float
    rounds: int
    max_rho: float = 0.0
    jain_rho: float = 1.0
    share_rho_le_1: float = 1.0
    app_rho: dict[str, float] = field(default_factory=dict)
    avg_feedback: float = 0.0
    median_feedback: float = 0.0
    p95_feedback: float = 0.0
    useful_utilization: float = 0.0
    avg_load: float = 0.0
    peak_load: float = 0.0
    max_height: int = 0
    suspensions: int = 0
    migrations: int = 0
    packs: int = 0
    unpacks: int = 0
    resizes: int = 0

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class SimulationResult:
    """Per-job records, the summary, and the busy-GPU timeline (step function)."""

    summary: Summary
    records: list[JobRecord]
    timeline_t: list[float] = field(default_factory=list)
    timeline_busy: list[int] = field(default_factory=list)
    total_gpus: int = 0

    @property
    def policy(self) -> str:
        return self.summary.policy

    def avg_jct(self) -> float:
        return self.summary.avg_jct


def _stats(values: Sequence[float]) -> tuple[float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(np.median(a)), float(np.percentile(a, 95))


def summarize(
    *,
    policy: str,
    records: list[JobRecord],
    total_gpus: int,
    makespan: float,
    busy_gpu_seconds: float,
    preemptions: int,
    overhead: float,
    wall_seconds: float,
    rounds: int,
    timeline: tuple[list[float], list[int]] | None,
    gandiva: GandivaFigures | None = None,
) -> SimulationResult:
    records = sorted(records, key=lambda r: r.job_id)
    avg_jct, med_jct, p95_jct = _stats([r.jct for r in records])
    avg_q, med_q, p95_q = _stats([r.queue_delay for r in records])
    util = busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 and total_gpus > 0 else 0.0
    rhos = app_rho(records, total_gpus)
    avg_fb, med_fb, p95_fb = _stats([r.feedback for r in records])
    useful = sum(r.gpus * r.work for r in records) / (total_gpus * makespan) if makespan > 0 and total_gpus > 0 else 0.0
    g = gandiva if gandiva is not None else GandivaFigures()
    rho_values = list(rhos.values())
    summary = Summary(
        policy=policy,
        jobs=len(records),
        avg_jct=avg_jct,
        median_jct=med_jct,
        p95_jct=p95_jct,
        avg_queue_delay=avg_q,
        median_queue_delay=med_q,
        p95_queue_delay=p95_q,
        makespan=makespan,
        preemptions=preemptions,
        preemption_overhead=overhead,
        gpu_utilization=util,
        wall_seconds=wall_seconds,
        rounds=rounds,
        max_rho=max(rho_values, default=0.0),
        jain_rho=jain_index(rho_values),
        share_rho_le_1=(sum(1 for r in rho_values if r <= 1.0 + 1e-9) / len(rho_values)) if rho_values else 1.0,
        app_rho=rhos,
        avg_feedback=avg_fb,
        median_feedback=med_fb,
        p95_feedback=p95_fb,
        useful_utilization=useful,
        **asdict(g),
    )
    tt, tb = timeline if timeline is not None else ([], [])
    return SimulationResult(summary, records, list(tt), list(tb), total_gpus)


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n at worst."""
    if not values:
        return 1.0
    a = np.asarray(values, dtype=float)
    sq = float((a * a).sum())
    return float(a.sum() ** 2 / (len(a) * sq)) if sq > 0 else 1.0


def app_rho(records: Sequence[JobRecord], total_gpus: int) -> dict[str, float]:
    """Finish-time fairness rho of every app of a finished replay (module docstring), by app name."""
    apps: dict[str, list[JobRecord]] = {}
    for r in records:
        apps.setdefault(r.app, []).append(r)
    if not apps or total_gpus <= 0:
        return {}
    spans = {a: (min(r.submit for r in rs), max(r.end for r in rs)) for a, rs in apps.items()}
    # Number of apps with work as a step function of time; its integral F(t) is piecewise
    # linear, so the average over any app's lifetime is (F(end) - F(start)) / (end - start).
    edges = sorted({t for s, e in spans.values() for t in (s, e)})
    xs = np.asarray(edges, dtype=float)
    count = np.zeros(len(xs))
    index = {t: i for i, t in enumerate(edges)}
    for s, e in spans.values():
        count[index[s]] += 1
        count[index[e]] -= 1
    active = np.cumsum(count)[:-1]  # apps with work on [xs[i], xs[i+1])
    integral = np.concatenate(([0.0], np.cumsum(active * np.diff(xs))))
    out: dict[str, float] = {}
    for a, rs in sorted(apps.items()):
        s, e = spans[a]
        t_shared = e - s
        n_avg = float((np.interp(e, xs, integral) - np.interp(s, xs, integral)) / t_shared) if t_shared > 0 else 1.0
        n_avg = max(n_avg, 1.0)
        work = sum(r.gpus * r.work for r in rs)
        demand = sum(r.gpus for r in rs)
        rate = min(total_gpus / n_avg, demand) if demand > 0 else 0.0
        t_ind = work / rate if rate > 0 else 0.0
        t_ind = max(t_ind, max(r.submit - s + r.work for r in rs))
        out[a] = t_shared / t_ind if t_ind > 0 else 1.0
    return out
