"""The allocation walk every scheduling policy shares (Tiresias Pseudocode 2).

A policy ranks the jobs; this module turns the ranking into start / keep /
preempt decisions with real placements, all-or-nothing (§3.1):

- Walk the jobs from highest to lowest priority.
- A RUNNING job is kept where it is if none of its GPUs were given to a
  higher-priority job; otherwise it is preempted (Pseudocode 2, line 18) and
  the rest of its GPUs become free for lower-priority jobs.
- A PENDING job is placed by the placement policy, first on idle GPUs only
  (no preemption needed); if that fails and preemption is allowed, on idle
  GPUs plus those of lower-priority running jobs, adding them lowest priority
  first, so exactly the lowest-priority jobs needed lose their GPUs.
- A job that cannot be placed is skipped (Pseudocode 2, line 16) and later
  jobs may still start; with ``head_of_line_blocking`` (YARN-CS FIFO) the walk
  starts nothing after the first pending job that cannot be placed.

Pseudocode 2 only counts GPUs; here a job whose GPUs cannot actually be placed
(fragmentation, consolidation) does not start either, because a job must never
be started on GPUs it cannot get.

GPUs are counted per node (GPU indices inside a node are Slurm's), so "which
GPUs were taken" is a count: on each node the GPUs a higher-priority job takes
beyond the idle ones are charged to the lowest-priority running jobs there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from typing import Mapping

from teiresias.domain import Job, JobId, Placement, Plan, Snapshot
from teiresias.policy.base import PlacementPolicy


@dataclass
class Walk:
    """What the walk decided; the policy wraps it into a Plan."""

    start: dict[JobId, Placement] = field(default_factory=dict)
    keep: list[JobId] = field(default_factory=list)
    preempt: list[JobId] = field(default_factory=list)
    reasons: dict[JobId, str] = field(default_factory=dict)


def walk(
    snapshot: Snapshot,
    ranked: Sequence[Job],
    placement: PlacementPolicy,
    *,
    preemptive: bool,
    head_of_line_blocking: bool = False,
    policy_name: str = "",
) -> Walk:
    """Decide start/keep/preempt for ``ranked`` (every job, highest priority first).

    Non-preemptive policies keep every running job whatever its rank.
    """
    st = _State(snapshot, ranked if preemptive else ())
    out = Walk()
    if not preemptive:
        # Running jobs first, wherever they rank: nothing is ever preempted.
        for j in ranked:
            if j.is_running:
                out.keep.append(j.job_id)
                if j.placement is not None:
                    st.take(j.placement)
    blocked_by: JobId | None = None

    for j in ranked:
        if j.is_running:
            if not preemptive:
                continue
            st.visit(j)
            if j.job_id in st.evicted:
                out.preempt.append(j.job_id)
                by = st.evicted[j.job_id]
                out.reasons[j.job_id] = f"preempted by higher-priority job {by}"
            else:
                out.keep.append(j.job_id)
            continue

        # PENDING job.
        need = j.num_gpus
        if blocked_by is not None:
            out.reasons[j.job_id] = f"blocked behind job {blocked_by} ({policy_name or 'fifo'})"
            continue
        got = placement.place(j, st.idle, st.cluster) if st.idle_total >= need else None
        if got is None and preemptive and st.idle_total + st.held_total >= need:
            got = _place_with_eviction(j, st, placement)
        if got is None:
            if st.idle_total < need:
                out.reasons[j.job_id] = f"waiting for {need} GPUs, {st.idle_total} free"
            else:
                out.reasons[j.job_id] = (
                    f"waiting for {need} GPUs: {st.idle_total} free but not placeable"
                    f" ({placement.name} placement)"
                )
            if head_of_line_blocking:
                blocked_by = j.job_id
            continue
        st.start(j.job_id, got)
        out.start[j.job_id] = got
    return out


class _State:
    """GPU bookkeeping of one walk.

    ``idle[n]``: GPUs on node n that nobody holds now or was given this round.
    ``held``: GPUs of running jobs not visited yet (they rank below everything
    visited), per node and in rank order: what preemption can hand out.
    Invariant: idle >= 0 everywhere; a job whose GPUs are handed out is evicted
    at once, so the rest of its GPUs become idle.
    """

    def __init__(self, snapshot: Snapshot, ranked: Sequence[Job]) -> None:
        self.cluster = snapshot.cluster
        self.holders: dict[str, list[Job]] = {}  # node -> unvisited running jobs, rank order
        self.held_total = 0
        self.visited: set[JobId] = set()
        self.evicted: dict[JobId, JobId] = {}  # victim -> the job it made room for
        held_per_node: dict[str, int] = {}
        every_running = [j for j in snapshot.jobs if j.is_running and j.placement is not None]
        on_offer = {j.job_id for j in ranked if j.is_running and j.placement is not None}
        self.evictable = [j for j in ranked if j.job_id in on_offer]  # rank order
        for j in every_running:
            for a in j.placement.allocations:
                held_per_node[a.node] = held_per_node.get(a.node, 0) + a.gpus
        # ``unavailable`` never evicts a managed running job (a DRAINing node lets
        # its jobs finish): capacity is at least what running jobs hold there.
        self.idle: dict[str, int] = {}
        for n in self.cluster.nodes:
            cap = max(n.gpus - snapshot.unavailable.get(n.name, 0), held_per_node.get(n.name, 0))
            self.idle[n.name] = cap - held_per_node.get(n.name, 0)
        # Running jobs not on offer (non-preemptive walk) are taken by the caller.
        for j in self.evictable:
            for a in j.placement.allocations:
                self.holders.setdefault(a.node, []).append(j)
            self.held_total += j.placement.num_gpus
        for j in every_running:
            if j.job_id not in on_offer:
                for a in j.placement.allocations:
                    self.idle[a.node] = self.idle.get(a.node, 0) + a.gpus
        self.idle_total = sum(self.idle.values())

    def take(self, placement: Placement) -> None:
        """Give idle GPUs to a job (start, or keep in a non-preemptive walk)."""
        for a in placement.allocations:
            self.idle[a.node] -= a.gpus
        self.idle_total -= placement.num_gpus

    def visit(self, job: Job) -> None:
        """A running job's turn: it keeps whatever was not handed out above it."""
        self.visited.add(job.job_id)
        if job.job_id in self.evicted or job.placement is None:
            return
        for a in job.placement.allocations:
            self.holders[a.node].remove(job)
        self.held_total -= job.placement.num_gpus

    def start(self, job_id: JobId, placement: Placement) -> None:
        """Start a job, evicting the lowest-priority holders of GPUs beyond the idle ones."""
        for a in placement.allocations:
            node_holders = self.holders.get(a.node, [])
            while self.idle[a.node] < a.gpus:
                victim = node_holders[-1]  # lowest priority on this node
                self._evict(victim, job_id)
        self.take(placement)

    def _evict(self, victim: Job, by: JobId) -> None:
        self.evicted[victim.job_id] = by
        for a in victim.placement.allocations:
            self.holders[a.node].remove(victim)
            self.idle[a.node] = self.idle.get(a.node, 0) + a.gpus
        self.idle_total += victim.placement.num_gpus
        self.held_total -= victim.placement.num_gpus


def _place_with_eviction(job: Job, st: _State, placement: PlacementPolicy) -> Placement | None:
    """Place ``job`` on idle GPUs plus those of the lowest-priority running jobs.

    Running jobs are added lowest priority first; placement is tried once the
    count suffices and again after each further job, so the jobs whose GPUs
    may be taken are the smallest lowest-priority set that works.
    """
    cand = dict(st.idle)
    total = st.idle_total
    for victim in reversed(st.evictable):
        if victim.job_id in st.visited:
            # Visited jobs rank above ``job``: their GPUs are not on offer.
            break
        if victim.job_id in st.evicted:
            continue  # its GPUs are already idle
        for a in victim.placement.allocations:
            cand[a.node] = cand.get(a.node, 0) + a.gpus
        total += victim.placement.num_gpus
        if total >= job.num_gpus:
            got = placement.place(job, cand, st.cluster)
            if got is not None:
                return got
    return None


def to_plan(
    ranked: Sequence[Job],
    w: Walk,
    *,
    queues: Mapping[JobId, int] | None = None,
    promote: Sequence[JobId] = (),
    index: Mapping[JobId, float] | None = None,
) -> Plan:
    """Wrap a walk into the Plan of the contract (every job in order and queues)."""
    order = tuple(j.job_id for j in ranked)
    return Plan(
        start=w.start,
        preempt=tuple(w.preempt),
        keep=tuple(w.keep),
        promote=tuple(promote),
        queues=dict(queues) if queues is not None else {jid: 0 for jid in order},
        order=order,
        reasons=w.reasons,
        index=dict(index) if index is not None else {},
    )
