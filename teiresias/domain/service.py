"""Attained service and executed time: the one definition every owner and policy uses.

Tiresias §3.2.2 ranks a job by its 2D attained service, W_J x t_J: its GPU
count times the time it has executed. §3.2.3 resets t_J (and the waiting
time delta_J) at a starvation promotion. Two figures follow, and each name
below means exactly one of them everywhere (docs/job-states.md, "Attained
service: what each figure means"):

- ``executed_time`` (t_J): seconds run *since the last promotion* (or since
  submission when never promoted); ``total_executed_time``: seconds run in
  all, never reset. A run counts from Slurm's StartTime (live) or its start
  event (simulated) to its end or now, restore overhead included.
- ``attained_service`` = W_J x t_J, in GPU-seconds, since the last promotion:
  what the queue thresholds and the Gittins index compare.
- ``attained_gpu_seconds`` = W_J x total executed time, never reset: what the
  job received in all (reports, the 2D-Gittins samples, the audit).
"""

from __future__ import annotations


def attained_service(num_gpus: int, executed_time: float) -> float:
    """W_J x t_J in GPU-seconds, since the last promotion (Tiresias §3.2.2-§3.2.3)."""
    return num_gpus * executed_time


def attained_gpu_seconds(num_gpus: int, total_executed_time: float) -> float:
    """All GPU-time received, in GPU-seconds: W_J x the total executed time (never reset)."""
    return num_gpus * total_executed_time
