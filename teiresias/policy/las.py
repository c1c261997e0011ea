"""Discretized 2D-LAS (Tiresias §3.2.2-3.2.3, Pseudocode 2) and its continuous form."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teiresias.domain import Job, Plan, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.allocate import to_plan
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.kept import KeptRanking, walk_ranked
from teiresias.policy.mlfq import QUEUE_ORDERS, Mlfq, mlfq_quiet_until


class LasPolicy:
    """2D-LAS: priority is inverse to attained service W_J * t_J (Pseudocode 1, line 3).

    Discretized (default): K = len(thresholds) + 1 queues, strict priority
    across queues, FIFO by first start time inside a queue, starvation
    promotion with PROMOTEKNOB, preemption per Pseudocode 2 (a job that does
    not fit is skipped, and preempted if it was running).

    Continuous (``continuous=True``, Fig. 7): jobs ranked by attained service,
    least first, ties by job id; no queues, no promotion.
    """

    name = "las"
    # Ranks each job by a key of its own, then ``walk`` (idle GPUs first): the
    # simulator may prune running jobs from a round (teiresias.policy.allocate).
    idle_first = True
    preemptive = True

    def __init__(
        self,
        placement: PlacementPolicy,
        thresholds: tuple[float, ...] = (3600.0,),
        promote_knob: float | None = None,
        continuous: bool = False,
        queue_order: str = "fifo",
    ) -> None:
        self.placement = placement
        self.thresholds = tuple(thresholds)
        self.promote_knob = promote_knob
        self.continuous = continuous
        if queue_order not in QUEUE_ORDERS:
            raise ConfigError(f"queue order {queue_order!r}: choose one of {', '.join(QUEUE_ORDERS)}")
        self.queue_order = queue_order

    def quiet_until(self, snapshot: Snapshot) -> float:
        """Until when this policy's plan for ``snapshot``'s jobs, left as they are, stays the same.

        Discretized: until the next demotion or promotion point (Tiresias
        §3.2.3; ``mlfq_quiet_until``). Continuous: attained service orders the
        jobs and moves all the time, so no quiet time (``snapshot.now``).
        """
        if self.continuous:
            return snapshot.now
        return mlfq_quiet_until(snapshot.jobs, self.thresholds, self.promote_knob, snapshot.now)

    def rank_keys(self, jobs: Sequence[Job], now: float) -> list[tuple[tuple[Any, ...], float]]:
        """Each job's (sort key in ``decide``'s ranking, until when it holds) (``KeyRanked``;
        teiresias.policy.base)."""
        if self.continuous:
            return [((j.attained_service, j.job_id), now) for j in jobs]
        return self._mlfq().keys(jobs, now)

    def _mlfq(self) -> Mlfq:
        """2D-LAS' queues (§3.2.3)."""
        return Mlfq(self.thresholds, self.promote_knob, order=self.queue_order)

    def decide(self, snapshot: Snapshot) -> Plan:
        return self.decide_kept(snapshot, None)

    def decide_kept(self, snapshot: Snapshot, kept: KeptRanking | None) -> Plan:
        """``decide`` for the jobs of ``snapshot`` among the running jobs ``kept`` holds (the
        owner's ranking of them: ``WalksKept``, teiresias.policy.kept); None: ``decide`` itself.
        The snapshot's jobs are ranked, then walked (Pseudocode 2)."""
        jobs = snapshot.jobs
        if self.continuous:
            keyed = sorted(((j.attained_service, j.job_id), j) for j in jobs)
            ranked = [j for _, j in keyed]
            w = walk_ranked(snapshot, ranked, [k for k, _ in keyed], kept, self.placement, policy_name=self.name)
            return to_plan(ranked, w)
        ranked, keys, queues, promoted, _ = self._mlfq().rank_keyed(jobs, snapshot.now)
        w = walk_ranked(snapshot, ranked, keys, kept, self.placement, policy_name=self.name)
        return to_plan(ranked, w, queues=queues, promote=promoted)
