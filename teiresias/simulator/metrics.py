"""What a replay measures (Tiresias §5.1 "Metric", Tables 4-5, Fig. 11/13).

- JCT: completion minus submission.
- Queueing delay: all the time a job spent not holding GPUs, i.e. JCT minus
  the time it held GPUs (initial wait plus waits after preemptions). Without
  preemption this is the classic first-start delay.
- GPU utilisation: allocated GPU-seconds over ``total GPUs x makespan``
  (GPUs held during a restore after preemption count as allocated).
- Makespan: last completion minus first submission.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

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
) -> SimulationResult:
    records = sorted(records, key=lambda r: r.job_id)
    avg_jct, med_jct, p95_jct = _stats([r.jct for r in records])
    avg_q, med_q, p95_q = _stats([r.queue_delay for r in records])
    util = busy_gpu_seconds / (total_gpus * makespan) if makespan > 0 and total_gpus > 0 else 0.0
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
    )
    tt, tb = timeline if timeline is not None else ([], [])
    return SimulationResult(summary, records, list(tt), list(tb), total_gpus)
