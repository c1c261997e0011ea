"""Discretized 2D-Gittins index scheduling (Tiresias §3.2.2-3.2.3, Pseudocodes 1-2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teiresias.domain import Job, Plan, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.allocate import to_plan
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.kept import KeptRanking, walk_ranked
from teiresias.policy.mlfq import QUEUE_ORDERS, Mlfq

# How the last queue is ordered: the paper's FIFO by first start, or the Gittins index with Delta = infinity.
LAST_QUEUE_ORDERS = ("fifo", "gittins")


class GittinsPolicy:
    """2D-Gittins: priority is the Gittins index of attained service W_J * t_J.

    Discretized: the queues, promotion and preemption of 2D-LAS; inside
    queue Q_i (i < K) jobs are sorted by G(a, Delta_i) with Delta_i = Q_i^hi
    (highest first, ties by job id). The paper's last queue, where
    Delta_K = infinity, is FIFO by first start time (§3.2.3):
    ``last_queue="fifo", queue_order="fifo"`` is the paper's 2D-Gittins.

    The defaults are not the paper's (docs/policies.md, "Defaults"; measured
    on four trace shapes beside the reference simulator, docs/benchmarks.md):

    - ``last_queue="gittins"``: the last queue is sorted by G(a', infinity),
      a' the attained service snapped down to the largest of the
      distribution's ``last_queue_points``-quantiles below it
      (``ServiceDistribution.residual_indices``; None: every sample). With
      the paper's two queues, everything past the first threshold (most of
      the GPU-time of a heavy-tailed workload) is otherwise served
      first-come first-served; the index lets jobs that have outlived only
      short samples go before those deep in the tail.
    - ``queue_order="lifo-resume"`` (``Mlfq.rank``): inside a queue running
      jobs keep their place, and among jobs the index cannot tell apart the
      last preempted resumes first.
    - ``time_limits=True``: a job's declared time limit (``Job.time_limit``)
      truncates the distribution at num_gpus x limit, snapped up to the
      index grid (``ServiceDistribution.snap_bounds``); jobs without one are
      ranked as before.

    ``preempt_cost`` (seconds of checkpoint + restore per preemption; 0 off,
    the paper's): in every queue ranked by an index, jobs swap only for more
    expected gain than the swap costs them (``Mlfq.rank``).

    Continuous (``continuous=True``, Fig. 7): every job ranked by the
    supremum over Delta of Pseudocode 1's ratio, highest first, ties by job id.

    A job promoted this round is indexed at attained service 0, as it will be
    once the owner resets t_J.
    """

    name = "gittins"
    # Ranks each job by a key of its own, then ``walk`` (idle GPUs first): the
    # simulator may prune running jobs from a round (teiresias.policy.allocate).
    idle_first = True
    preemptive = True

    def __init__(
        self,
        placement: PlacementPolicy,
        distribution: ServiceDistribution | None,
        thresholds: tuple[float, ...] = (3600.0,),
        promote_knob: float | None = None,
        continuous: bool = False,
        last_queue: str = "gittins",
        preempt_cost: float = 0.0,
        last_queue_points: int | None = 16,
        queue_order: str = "lifo-resume",
        time_limits: bool = True,
    ) -> None:
        if last_queue not in LAST_QUEUE_ORDERS:
            raise ConfigError(f"last queue order {last_queue!r}: choose one of {', '.join(LAST_QUEUE_ORDERS)}")
        if distribution is None:
            raise ConfigError(
                "policy 'gittins' needs a GPU-time distribution; give --gittins-samples FILE"
                " (a CSV with a 'duration' column) or use las"
            )
        self.placement = placement
        self.distribution = distribution
        self.thresholds = tuple(thresholds)
        self.promote_knob = promote_knob
        self.continuous = continuous
        self.last_queue = last_queue
        if preempt_cost < 0:
            raise ConfigError(f"preemption cost {preempt_cost} must be >= 0 seconds")
        self.preempt_cost = preempt_cost
        if last_queue_points is not None and last_queue_points < 2:
            raise ConfigError(f"last queue points {last_queue_points} must be >= 2 (or None: every sample)")
        self.last_queue_points = last_queue_points
        if queue_order not in QUEUE_ORDERS:
            raise ConfigError(f"queue order {queue_order!r}: choose one of {', '.join(QUEUE_ORDERS)}")
        self.queue_order = queue_order
        self.time_limits = time_limits

    def with_distribution(self, distribution: ServiceDistribution) -> GittinsPolicy:
        """The same policy over a new distribution (the controller learns from completed jobs)."""
        return GittinsPolicy(
            self.placement,
            distribution,
            self.thresholds,
            self.promote_knob,
            self.continuous,
            self.last_queue,
            self.preempt_cost,
            self.last_queue_points,
            self.queue_order,
            self.time_limits,
        )

    def _mlfq(self) -> Mlfq:
        """2D-Gittins' queues (§3.2.3) with the current distribution's indices."""
        return Mlfq(
            self.thresholds,
            self.promote_knob,
            self._index,
            self._last_index if self.last_queue == "gittins" else None,
            self.preempt_cost,
            self._finish_prob,
            self.queue_order,
            self._last_changes if self.last_queue == "gittins" else None,
            self.time_limits,
        )

    def _snap(self, bounds: Sequence[float] | None) -> np.ndarray | None:
        """Time-limit bounds on the index grid (``ServiceDistribution.snap_bounds``)."""
        return None if bounds is None else self.distribution.snap_bounds(bounds, self.last_queue_points)

    def _index(self, attained: Sequence[float], quanta: Sequence[float], bounds: Sequence[float] | None) -> np.ndarray:
        return self.distribution.indices(attained, quanta, self._snap(bounds))

    def _finish_prob(
        self, attained: Sequence[float], quanta: Sequence[float], bounds: Sequence[float] | None
    ) -> np.ndarray:
        return self.distribution.finish_probabilities(attained, quanta, self._snap(bounds))

    def _last_index(self, attained: Sequence[float], bounds: Sequence[float] | None) -> np.ndarray:
        return self.distribution.residual_indices(attained, self.last_queue_points, self._snap(bounds))

    def _last_changes(self, attained: Sequence[float]) -> np.ndarray:
        return self.distribution.residual_changes_at(attained, self.last_queue_points)

    def rank_keys(self, jobs: Sequence[Job], now: float) -> list[tuple[tuple[Any, ...], float]]:
        """Each job's (sort key in ``decide``'s ranking, until when it holds) (``KeyRanked``;
        teiresias.policy.base)."""
        if self.continuous:
            dist = self.distribution
            return [((-dist.index(j.attained_service), j.job_id), now) for j in jobs]
        return self._mlfq().keys(jobs, now)

    def decide(self, snapshot: Snapshot) -> Plan:
        return self.decide_kept(snapshot, None)

    def decide_kept(self, snapshot: Snapshot, kept: KeptRanking | None) -> Plan:
        """``decide`` for the jobs of ``snapshot`` among the running jobs ``kept`` holds (the
        owner's ranking of them: ``WalksKept``, teiresias.policy.kept); None: ``decide`` itself.
        The snapshot's jobs are ranked, then walked (Pseudocode 2)."""
        jobs = snapshot.jobs
        if self.continuous:
            dist = self.distribution
            index = {j.job_id: dist.index(j.attained_service) for j in jobs}
            keyed = sorted(((-index[j.job_id], j.job_id), j) for j in jobs)
            ranked = [j for _, j in keyed]
            w = walk_ranked(snapshot, ranked, [k for k, _ in keyed], kept, self.placement, policy_name=self.name)
            return to_plan(ranked, w, index=index)
        ranked, keys, queues, promoted, indices = self._mlfq().rank_keyed(jobs, snapshot.now)
        w = walk_ranked(snapshot, ranked, keys, kept, self.placement, policy_name=self.name)
        return to_plan(ranked, w, queues=queues, promote=promoted, index=indices)
