"""The FIFO baselines of Tiresias §5: YARN-CS and Best-effort.

Both rank jobs by submit time (then job id) and never preempt.
- ``fifo`` (YARN-CS): strict FIFO with head-of-line blocking: if the oldest
  waiting job cannot be placed, nothing behind it starts.
- ``best-effort``: FIFO, but a later job that fits may jump a blocked head
  (the reference simulator's ``fjf``, "Best-effort" in Tiresias Table 5).
"""

from __future__ import annotations

import math

from teiresias.domain import Job, Plan, Snapshot
from teiresias.policy.allocate import to_plan, walk
from teiresias.policy.base import PlacementPolicy


def fifo_key(job: Job) -> tuple[float, int]:
    return (job.submit_time, job.job_id)


class FifoPolicy:
    """YARN-CS: FIFO by submit time, head-of-line blocking, no preemption (Tiresias §5.1)."""

    name = "fifo"
    # Ranks each job by a key of its own, then ``walk`` (idle GPUs first): the
    # simulator may prune running jobs from a round (teiresias.policy.allocate).
    idle_first = True
    preemptive = False
    blocking = True

    def __init__(self, placement: PlacementPolicy) -> None:
        self.placement = placement

    def quiet_until(self, snapshot: Snapshot) -> float:
        """Until when the plan for ``snapshot``'s jobs, left as they are, stays the same: for ever.

        FIFO keys (submit time, id) and placement do not move with time.
        """
        return math.inf

    def decide(self, snapshot: Snapshot) -> Plan:
        ranked = sorted(snapshot.jobs, key=fifo_key)
        w = walk(
            snapshot,
            ranked,
            self.placement,
            preemptive=False,
            head_of_line_blocking=self.blocking,
            policy_name=self.name,
        )
        return to_plan(ranked, w)


class BestEffortPolicy(FifoPolicy):
    """Best-effort FIFO: later jobs that fit jump a blocked head; no preemption (Tiresias §5.1)."""

    name = "best-effort"
    blocking = False
