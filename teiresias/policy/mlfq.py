"""Discretized 2DAS queues (Tiresias §3.2.3): K queues by attained service, promotion.

Queue membership is recomputed from each job's attained service W_J * t_J on
every round, so the policy keeps no state between rounds:

- Q_i holds jobs with attained service in [Q_i^lo, Q_i^hi); with thresholds
  (T_1 < ... < T_{K-1}), a job is in queue #{T : T <= W_J t_J}. Demotion
  therefore happens exactly when the attained service reaches a threshold
  (the reference simulator's ``j_gt >= queue_limit``).
- Starvation promotion: a WAITING job in a lower queue with
  delta_J >= PROMOTEKNOB * t_J is treated as Q1 this round and returned in
  ``Plan.promote``; the owner then resets t_J and delta_J, so from the next
  round on its attained service puts it in Q1 by itself.
"""

from __future__ import annotations

import bisect
from typing import Sequence

from teiresias.domain import Job, JobId


def queue_of(attained: float, thresholds: Sequence[float]) -> int:
    """0-based queue index of an attained service (GPU-seconds)."""
    return bisect.bisect_right(thresholds, attained)


def is_starving(job: Job, queue: int, promote_knob: float | None) -> bool:
    """Tiresias §3.2.3: WAITING in a lower queue with delta_J >= PROMOTEKNOB * t_J."""
    return (
        promote_knob is not None
        and queue > 0
        and not job.is_running
        and job.waiting_time >= promote_knob * job.executed_time
    )


def assign_queues(
    jobs: Sequence[Job], thresholds: Sequence[float], promote_knob: float | None
) -> tuple[dict[JobId, int], list[JobId]]:
    """Queue of every job this round, and the jobs promoted to Q1 by starvation."""
    queues: dict[JobId, int] = {}
    promoted: list[JobId] = []
    for j in jobs:
        q = queue_of(j.attained_service, thresholds)
        if is_starving(j, q, promote_knob):
            promoted.append(j.job_id)
            q = 0
        queues[j.job_id] = q
    return queues, promoted


def start_order_key(job: Job, now: float) -> tuple[bool, float, float, int]:
    """FIFO by first start time inside a queue (Tiresias §3.2.3).

    Jobs that never started come after every started one (by submit time):
    the paper orders by start time precisely so that a queue's not-yet-started
    jobs cannot push out started ones ("FIFO ordering on submission time
    instead of start time can lead to unnecessary preemptions"), and the
    reference simulator likewise moves waiting jobs behind running ones.
    A running job without a recorded start is taken as started now.
    """
    start = job.first_start_time
    if start is None and job.is_running:
        start = now
    if start is None:
        return (True, job.submit_time, job.submit_time, job.job_id)
    return (False, start, job.submit_time, job.job_id)
