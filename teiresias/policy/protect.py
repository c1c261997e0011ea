"""Minimum run times: when a running job may be preempted again (issue 20 B12).

A job preempted soon after its start pays a checkpoint and a restore for a few
seconds of service (a Q2 job was started and preempted 2.2 s later by an older
Q2 job), and a job that cannot checkpoint loses all its work since it started
(runs of 38 s, 1 s and 16 s of plain jobs requeued again and again: 112 s of
work lost). The owner (simulator or controller) puts the instant a running job
becomes preemptible on ``Job.protected_until``; the allocation walk
(teiresias/policy/allocate.py) keeps such a job whatever its rank. One rule,
written once, for both owners.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MinRun:
    """``checkpointing``: seconds a job that checkpoints runs before it may be
    preempted (0: at once, the paper's). ``plain``: the same for a job that
    cannot checkpoint (its preemption loses all its work since it started);
    ``math.inf``: such a job is never preempted once started."""

    checkpointing: float = 0.0
    plain: float = 0.0

    def __post_init__(self) -> None:
        for name in ("checkpointing", "plain"):
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"minimum run time {name} must be >= 0 seconds (inf: never preempted), got {v}")


def protected_until(run_start: float | None, checkpoints: bool, rule: MinRun) -> float | None:
    """The instant a job running since ``run_start`` may be preempted, or None
    when it may be at once (no protection, or not running)."""
    if run_start is None:
        return None
    wait = rule.checkpointing if checkpoints else rule.plain
    if wait <= 0:
        return None
    return math.inf if math.isinf(wait) else run_start + wait
