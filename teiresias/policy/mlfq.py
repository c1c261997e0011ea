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
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from teiresias.domain import Job, JobId, JobState

if TYPE_CHECKING:
    import numpy as np

Values: TypeAlias = "Sequence[float] | np.ndarray"
"""Per-job values, in the jobs' order: a sequence of floats or a numpy array of them."""
IndexFn = Callable[[Sequence[float], Sequence[float], "Sequence[float] | None"], Values]
"""Values for many jobs at once from (attained services, quanta, bounds or None): Gittins
indices or finish chances; a bound is the job's largest possible GPU-time (inf: none)."""
LastIndexFn = Callable[[Sequence[float], "Sequence[float] | None"], Values]
"""Last-queue indices (Delta = infinity) for many jobs at once from (attained services, bounds or None)."""
ChangesFn = Callable[[Sequence[float]], Values]
"""Per job, the attained service at which its last-queue index next changes."""


class _Keyed(NamedTuple):
    """``Mlfq._keyed``'s answer: the keys (FIFO-keyed first, last-queue index keys last) and the
    round's queues, promotions and indices."""

    keyed: list[tuple[Any, ...]]
    queues: dict[JobId, int]
    promoted: list[JobId]
    indices: dict[JobId, float]
    n_fifo: int
    n_last: int


# Orders inside a queue (``Mlfq.rank``): the paper's FIFO by first start, running jobs first,
# and running first with the last preempted job resuming first (the reference simulator's lists).
QUEUE_ORDERS = ("fifo", "running-first", "lifo-resume")


@dataclass(frozen=True)
class Mlfq:
    """The discretized 2DAS queues' settings (Tiresias §3.2.3), ranking jobs by them.

    ``thresholds`` (T_1 < ... < T_{K-1}) and ``promote_knob`` (None: no
    starvation promotion) alone give 2D-LAS; ``index`` makes it 2D-Gittins,
    ``last_index`` sorts the last queue by index too, and ``restart_cost``
    with ``finish_prob`` makes the indices preemption-cost aware (``rank``).
    ``order`` (one of ``QUEUE_ORDERS``) is the order inside a queue where no
    index tells jobs apart (``rank``). ``last_changes(attained)`` gives, per job, the attained
    service at which its ``last_index`` next changes (the index's grid), so
    ``keys`` can promise how long a running job's last-queue key holds.
    ``limits``: hand the index functions each job's bound, num_gpus x
    ``time_limit`` GPU-seconds (inf without a limit): a job cannot run past its
    limit, so its index is taken over the distribution truncated there.
    """

    thresholds: Sequence[float]
    promote_knob: float | None
    index: IndexFn | None = None
    last_index: LastIndexFn | None = None
    restart_cost: float = 0.0
    finish_prob: IndexFn | None = None
    order: str = "fifo"
    last_changes: ChangesFn | None = None
    limits: bool = False

    def rank(
        self, jobs: Sequence[Job], now: float
    ) -> tuple[list[Job], dict[JobId, int], list[JobId], dict[JobId, float]]:
        """Rank jobs for discretized 2DAS (§3.2.3): queue first, then inside the queue.

        Queue: q = #{thresholds <= W_J t_J}, or 0 for a job promoted this round
        (a WAITING job in a lower queue with delta_J >= PROMOTEKNOB * t_J).

        Inside queue q < K-1, with ``index`` given (2D-Gittins), by index highest
        first, ties by job id; ``index(attained, quanta)`` computes all of them at
        once (a promoted job is indexed at attained service 0, as it will be once
        the owner resets t_J; the quantum of Q_q is its threshold). Otherwise
        (2D-LAS, and the last queue always) FIFO by first start time (§3.2.3),
        ties by submit time and job id; jobs that never started come after every
        started one, by submit time: the paper orders by start time precisely so
        that a queue's not-yet-started jobs cannot push out started ones ("FIFO
        ordering on submission time instead of start time can lead to unnecessary
        preemptions"), and the reference simulator likewise moves waiting jobs
        behind running ones. A running job without a recorded start counts as
        started now.

        With ``last_index`` given (``policy.last_queue: gittins``), the last queue
        too is sorted by an index, highest first, ``last_index(attained)``
        computing all of them at once (Delta = infinity there); equal indices keep
        the FIFO order above, so jobs the distribution cannot tell apart are
        never reshuffled.

        ``restart_cost`` (seconds a preemption costs a job: checkpoint plus
        restore) makes every index-ranked queue preemption-cost aware. An index
        is P / E: the chance to finish within the quantum over the expected
        GPU-time spent in it (Delta = infinity: P = 1, E the expected remaining
        GPU-time). A running job's E is lowered, a waiting job's that must
        restore raised, by its cost in GPU-seconds (cost x GPUs;
        ``finish_prob(attained, quanta)`` gives P). So a waiting job displaces a
        running one only for more expected gain than the swap costs the two of
        them; with cost 0 nothing changes.

        ``order`` (``QUEUE_ORDERS``; ``fifo`` above is the paper's) changes the
        order inside every queue, not across queues:

        - ``running-first`` (running jobs keep their place inside a queue; the
          reference simulator's queue lists keep running jobs ahead of waiting
          ones): every running job of a queue ranks before every waiting job of
          it, each group in the order above. A job keeps its GPUs until it is
          demoted or a job of a higher queue needs them: fewer preemptions, at
          the price of a waiting job of the queue (a preempted one, or one with
          a better index) waiting for a running one to leave.
        - ``lifo-resume`` (the reference's lists as they evolve): running first
          as above, running jobs by their latest start (the last started gives
          its GPUs back first) and waiting ones by their latest preemption, the
          last preempted first (it resumes before jobs that waited longer);
          never-started jobs after them by submit time. ``Job.state_since``
          gives both times (the first start, then ``now``, where unknown). A
          job's churn stays at the top of the stack: the jobs that ran longest
          uninterrupted keep running, and a job preempted for a short Q1 burst
          gets its GPUs back first.

        Where an index ranks a queue, the order splits only equal indices,
        after the running-first split.

        Lean on purpose: the simulator ranks every job on every event.
        Returns (ranked, queues, promoted, indices).
        """
        ranked, _, queues, promoted, indices = self.rank_keyed(jobs, now)
        return ranked, queues, promoted, indices

    def rank_keyed(
        self, jobs: Sequence[Job], now: float
    ) -> tuple[list[Job], list[tuple[Any, ...]], dict[JobId, int], list[JobId], dict[JobId, float]]:
        """``rank`` with each ranked job's sort key (the key ``keys`` gives it) beside it:
        (ranked, keys, queues, promoted, indices)."""
        got = self._keyed(jobs, now)
        keyed = got.keyed
        keyed.sort()
        return [t[-1] for t in keyed], [t[:-1] for t in keyed], got.queues, got.promoted, got.indices

    def keys(self, jobs: Sequence[Job], now: float) -> list[tuple[tuple[Any, ...], float]]:
        """(key, until) per job: the sort key ``rank`` gives it, ending
        in its job id, and until when that key stays the same while the job stays in its state.

        ``rank`` orders jobs by exactly these keys, smallest first; a key
        depends on its job alone, so keys of a subset rank it as the whole set
        ranks it (what ``KeyRanked`` promises; teiresias.policy.base). A running
        job keyed FIFO (q, first start, submit, id) keeps its key until W_J t_J
        reaches its queue's threshold (demotion; for ever in the last queue); a
        running job's index key moves with its attained service: ``now``,
        recompute it next time, except in the last queue with ``last_changes``
        (the index is snapped to a grid: until the next grid point). A waiting
        job's t_J stands still, so its key holds for ever, unless promotion is
        on (it may be promoted: ``now``).
        """
        thresholds, promote_knob = self.thresholds, self.promote_knob
        last = len(thresholds)
        running = JobState.RUNNING
        inf = math.inf
        out: list[tuple[tuple[Any, ...], float]] = []
        got = self._keyed(jobs, now)
        n_fifo, n_last = got.n_fifo, got.n_last
        keyed = got.keyed
        for i, t in enumerate(keyed):
            j = t[-1]
            q = t[0]
            until = now
            if j.state is not running:
                if promote_knob is None:
                    until = inf
            elif i < n_fifo and j.first_start_time is not None and j.num_gpus > 0:
                # FIFO-keyed (q, start, submit, id): only demotion moves it.
                if q >= last:
                    until = inf
                else:
                    until = now + (thresholds[q] - j.attained_service) / j.num_gpus
            out.append((t[:-1], until))
        if n_last and self.last_changes is not None:
            # A running job's last-queue index key holds until its attained service reaches
            # the next grid point: the index is snapped to the grid, and its preemption cost
            # depends only on the job being running.
            first = len(keyed) - n_last
            at = [i for i in range(first, len(keyed)) if keyed[i][-1].state is running and keyed[i][-1].num_gpus > 0]
            if at:
                held = [keyed[i][-1] for i in at]
                attained = [j.attained_service for j in held]
                for i, j, a, nxt in zip(at, held, attained, self.last_changes(attained)):
                    out[i] = (out[i][0], now + (float(nxt) - a) / j.num_gpus)
        return out

    def _keyed(self, jobs: Sequence[Job], now: float) -> _Keyed:
        """``rank``'s sort keys, unsorted: (queue, ..., job id, job) per job, the FIFO-keyed
        ones first and the last-queue index keys last (``_Keyed``)."""
        thresholds, promote_knob, index, last_index = self.thresholds, self.promote_knob, self.index, self.last_index
        restart_cost, finish_prob, order = self.restart_cost, self.finish_prob, self.order
        split = order != "fifo"
        lifo = order == "lifo-resume"
        last = len(thresholds)
        queues: dict[JobId, int] = {}
        promoted: list[JobId] = []
        indices: dict[JobId, float] = {}
        keyed: list[tuple[Any, ...]] = []
        add = keyed.append
        running = JobState.RUNNING
        bisect_right = bisect.bisect_right
        # Jobs of non-last queues waiting for their Gittins index: (job, q, attained).
        to_index: list[tuple[Job, int, float]] = []
        # Jobs of the last queue waiting for their index: (job, attained, start).
        to_last: list[tuple[Job, float, float]] = []
        inf = math.inf
        single = len(thresholds) == 1
        t0 = thresholds[0] if single else 0.0
        for j in jobs:
            jid = j.job_id
            attained = j.attained_service  # W_J x t_J (teiresias.domain.service)
            # K = 2 (the paper's default) needs no binary search.
            q = (1 if attained >= t0 else 0) if single else bisect_right(thresholds, attained)
            if (
                promote_knob is not None
                and q > 0
                and j.state is not running
                and j.waiting_time >= promote_knob * j.executed_time
            ):
                promoted.append(jid)
                q = 0
                attained = 0.0
            queues[jid] = q
            # Sort keys end in the unique job id, then the job: jobs are never compared.
            if index is not None and q < last:
                to_index.append((j, q, attained))
                continue
            start = j.first_start_time
            if start is None:
                # Never started: after every started job of the queue, by submit time.
                start = now if j.state is running else inf
            elif lifo:
                since = j.state_since
                if j.state is running:
                    start = since if since is not None else start
                else:
                    start = -since if since is not None else -start
            if last_index is not None and q == last:
                to_last.append((j, attained, start))
                continue
            if split:
                add((q, j.state is not running, start, j.submit_time, jid, j))
            else:
                add((q, start, j.submit_time, jid, j))
        n_fifo = len(keyed)
        if to_index and index is not None:  # to_index is filled only when index is set
            att, quanta = [t[2] for t in to_index], [thresholds[t[1]] for t in to_index]
            bounds = _bounds([t[0] for t in to_index]) if self.limits else None
            values = index(att, quanta, bounds)
            probs = finish_prob(att, quanta, bounds) if restart_cost > 0 and finish_prob is not None else None
            for k, ((j, q, _), g) in enumerate(zip(to_index, values)):
                g = float(g)
                if probs is not None and g > 0:
                    # index = P / E (E: expected GPU-time within the quantum): the cost joins E.
                    g = _with_cost(g, float(probs[k]), restart_cost * j.num_gpus, j)
                indices[j.job_id] = g
                if split:
                    add((q, j.state is not running, -g, j.job_id, j))
                else:
                    add((q, -g, j.job_id, j))
        if to_last and last_index is not None:  # to_last is filled only when last_index is set
            values = last_index([t[1] for t in to_last], _bounds([t[0] for t in to_last]) if self.limits else None)
            for (j, _, start), g in zip(to_last, values):
                g = float(g)
                if restart_cost > 0 and g > 0:
                    g = _with_cost(g, 1.0, restart_cost * j.num_gpus, j)
                indices[j.job_id] = g
                if split:
                    add((last, j.state is not running, -g, start, j.submit_time, j.job_id, j))
                else:
                    add((last, -g, start, j.submit_time, j.job_id, j))
        return _Keyed(keyed, queues, promoted, indices, n_fifo, len(to_last))


def _bounds(jobs: Sequence[Job]) -> list[float]:
    """Each job's largest possible GPU-time: its GPUs times its time limit (inf without one)."""
    inf = math.inf
    return [j.num_gpus * j.time_limit if j.time_limit is not None else inf for j in jobs]


def rank_mlfq(
    jobs: Sequence[Job], thresholds: Sequence[float], promote_knob: float | None, now: float
) -> tuple[list[Job], dict[JobId, int], list[JobId], dict[JobId, float]]:
    """2D-LAS's ranking (Tiresias §3.2.3): ``Mlfq(thresholds, promote_knob).rank(jobs, now)``."""
    return Mlfq(thresholds, promote_knob).rank(jobs, now)


def _with_cost(g: float, p: float, cost: float, j: Job) -> float:
    """Index g = p / E with a preemption's cost (GPU-seconds) taken off E for a running job
    (a swap would cost it that) and added for a waiting job that must restore."""
    if j.state is JobState.RUNNING:
        # Never below a second of GPU-time: the index stays finite.
        return p / max(p / g - cost, 1.0)
    if j.first_start_time is not None:
        return p / (p / g + cost)
    return g


def mlfq_quiet_until(jobs: Sequence[Job], thresholds: Sequence[float], promote_knob: float | None, now: float) -> float:
    """The earliest time after ``now`` at which ``rank_mlfq`` may rank ``jobs`` differently.

    For the same jobs in the same states, with t_J growing at rate 1 while a
    job runs and delta_J while it waits (their definitions, §3.2.3), the
    ranking is keyed by (queue, first start, submit, id): only the queue moves
    with time. A running job changes queue when W_J * t_J reaches the next
    threshold (demotion, §3.2.3); a waiting job in a lower queue when
    delta_J reaches PROMOTEKNOB * t_J (promotion). A running job without a
    recorded start is keyed by ``now`` itself: no quiet time then.
    """
    soonest = math.inf
    last = len(thresholds)
    running = JobState.RUNNING
    for j in jobs:
        if j.state is running:
            if j.first_start_time is None:
                return now
            g = j.num_gpus
            if g <= 0:
                continue
            attained = j.attained_service
            q = bisect.bisect_right(thresholds, attained)
            if q < last:
                soonest = min(soonest, now + (thresholds[q] - attained) / g)
        elif promote_knob is not None:
            e = j.executed_time
            if bisect.bisect_right(thresholds, j.num_gpus * e) > 0:
                soonest = min(soonest, now + (promote_knob * e - j.waiting_time))
    return max(soonest, now)
