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
    # Failure memo, so 10,000 waiting jobs of a few shapes cost a few placements:
    # feasibility depends only on the job's shape (``placement.job_key``) and the
    # free map. ``idle`` only shrinks between evictions (hence the version);
    # idle + unvisited held GPUs only ever shrinks during a walk.
    job_key = getattr(placement, "job_key", None)
    idle_failed: dict[object, int] = {}
    avail_failed: set[object] = set()

    for j in ranked:
        if j.is_running:
            if not preemptive:
                continue
            st.visit(j)
            if j.job_id in st.evicted:
                out.preempt.append(j.job_id)
                out.reasons[j.job_id] = f"preempted by higher-priority job {st.evicted[j.job_id]}"
            else:
                out.keep.append(j.job_id)
            continue

        # PENDING job.
        need = j.num_gpus
        if blocked_by is not None:
            out.reasons[j.job_id] = f"blocked behind job {blocked_by} ({policy_name or 'fifo'})"
            continue
        key = job_key(j) if job_key is not None else None
        got = None
        if st.idle_total >= need and (key is None or idle_failed.get(key) != st.version):
            got = placement.place(j, st.idle, st.cluster)
            if got is None and key is not None:
                idle_failed[key] = st.version
        if (
            got is None
            and preemptive
            and st.held_total > 0
            and st.idle_total + st.held_total >= need
            and (key is None or key not in avail_failed)
        ):
            got = _place_with_eviction(j, st, placement)
            if got is None and key is not None:
                avail_failed.add(key)
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
    ``holders[n]``: running jobs not visited yet on node n, in rank order (they
    rank below everything visited): what preemption can hand out.
    ``avail[n]`` = idle + GPUs of those holders.
    Invariant: idle >= 0 everywhere; a job whose GPUs are handed out is evicted
    at once, so the rest of its GPUs become idle (and ``version`` moves on).
    """

    def __init__(self, snapshot: Snapshot, ranked: Sequence[Job]) -> None:
        self.cluster = snapshot.cluster
        self.holders: dict[str, list[Job]] = {}
        self.held_total = 0
        self.version = 0
        self.visited: set[JobId] = set()
        self.n_visited = 0  # running jobs on offer visited so far (a prefix of ``evictable``)
        self.n_evicted_unvisited = 0
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
            held = held_per_node.get(n.name, 0)
            self.idle[n.name] = max(n.gpus - snapshot.unavailable.get(n.name, 0), held) - held
        self.avail = dict(self.idle)
        for j in self.evictable:
            for a in j.placement.allocations:
                self.holders.setdefault(a.node, []).append(j)
                self.avail[a.node] = self.avail.get(a.node, 0) + a.gpus
            self.held_total += j.placement.num_gpus
        # Running jobs not on offer (non-preemptive walk): the caller ``take``s them.
        for j in every_running:
            if j.job_id not in on_offer:
                for a in j.placement.allocations:
                    self.idle[a.node] = self.idle.get(a.node, 0) + a.gpus
                    self.avail[a.node] = self.avail.get(a.node, 0) + a.gpus
        self.idle_total = sum(self.idle.values())

    def take(self, placement: Placement) -> None:
        """Give idle GPUs to a job (start, or keep in a non-preemptive walk)."""
        for a in placement.allocations:
            self.idle[a.node] -= a.gpus
            self.avail[a.node] -= a.gpus
        self.idle_total -= placement.num_gpus

    def visit(self, job: Job) -> None:
        """A running job's turn: it keeps whatever was not handed out above it."""
        self.visited.add(job.job_id)
        if job.placement is None:
            return
        self.n_visited += 1
        if job.job_id in self.evicted:
            self.n_evicted_unvisited -= 1
            return
        for a in job.placement.allocations:
            self.holders[a.node].remove(job)
            self.avail[a.node] -= a.gpus
        self.held_total -= job.placement.num_gpus

    def n_unvisited_holders(self) -> int:
        """Running jobs ranked below the current one that still hold their GPUs."""
        return len(self.evictable) - self.n_visited - self.n_evicted_unvisited

    def start(self, job_id: JobId, placement: Placement) -> None:
        """Start a job, evicting the lowest-priority holders of GPUs beyond the idle ones."""
        for a in placement.allocations:
            node_holders = self.holders.get(a.node, [])
            while self.idle[a.node] < a.gpus:
                self._evict(node_holders[-1], job_id)  # lowest priority on this node
        self.take(placement)

    def _evict(self, victim: Job, by: JobId) -> None:
        self.evicted[victim.job_id] = by
        self.n_evicted_unvisited += 1
        self.version += 1
        for a in victim.placement.allocations:
            self.holders[a.node].remove(victim)
            self.idle[a.node] = self.idle.get(a.node, 0) + a.gpus
        self.idle_total += victim.placement.num_gpus
        self.held_total -= victim.placement.num_gpus


def _place_with_eviction(job: Job, st: _State, placement: PlacementPolicy) -> Placement | None:
    """Place ``job`` on idle GPUs plus those of the fewest lowest-priority running jobs.

    First on everything lower-ranked jobs hold (if that fails, nothing can
    help); then on idle GPUs plus the m lowest-priority running jobs' GPUs,
    with the smallest m that works found by galloping + binary search
    (feasibility only grows with m), so the jobs whose GPUs may be taken are the lowest-ranked ones.
    """
    full = placement.place(job, st.avail, st.cluster)
    if full is None:
        return None
    # Victims lowest priority first, listed lazily: usually only a few are needed.
    # Running jobs are visited in rank order, so the unvisited ones are
    # ``evictable[st.n_visited:]``; visited jobs rank above ``job``, not on offer.
    victims: list[Job] = []
    source = (v for v in reversed(st.evictable[st.n_visited:]) if v.job_id not in st.evicted)

    def first(m: int) -> list[Job]:
        while len(victims) < m:
            victims.append(next(source))
        return victims[:m]

    def attempt(m: int) -> Placement | None:
        cand = dict(st.idle)
        for v in first(m):
            for a in v.placement.allocations:
                cand[a.node] = cand.get(a.node, 0) + a.gpus
        return placement.place(job, cand, st.cluster)

    # Below ``lo`` victims the GPU count alone cannot suffice; with all of them
    # the map is ``avail``, where ``full`` already fits.
    lo, total = 0, st.idle_total
    while total < job.num_gpus:
        total += first(lo + 1)[lo].placement.num_gpus
        lo += 1
    # Galloping from ``lo`` (usually the answer: the lowest job's own GPUs fit),
    # then binary search in the last gap.
    hi, best = st.n_unvisited_holders(), full
    step = 1
    while lo < hi:
        probe = min(lo + step - 1, hi - 1)
        got = attempt(probe)
        if got is not None:
            best, hi = got, probe
            break
        lo, step = probe + 1, step * 2
    while lo < hi:
        mid = (lo + hi) // 2
        got = attempt(mid)
        if got is not None:
            best, hi = got, mid
        else:
            lo = mid + 1
    return best


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
