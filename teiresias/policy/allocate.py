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

A policy that ranks every job by a key of that job alone and then calls
``walk`` marks itself ``idle_first = True`` (and says whether it is
``preemptive``). What that promises an owner: pending jobs meet the idle GPUs
in the same relative order whoever else is in the snapshot, and a pending job
that fits the idle GPUs takes them without touching a running job. So if a
snapshot holding only the pending jobs (running jobs' GPUs as
``unavailable``) starts all of them, the full snapshot makes the same starts
and promotions and preempts nothing (always so without preemption); the
simulator uses this to leave the running majority out of most rounds
(``teiresias.simulator.engine.Simulator._pruned_plan``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import sub
from typing import Any, Protocol

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Plan, Snapshot
from teiresias.policy.base import PlacementPolicy

_RUNNING = JobState.RUNNING


class _Placed(Protocol):
    """A running job on offer for preemption, typed as what it is: a Job whose placement is set."""

    @property
    def job_id(self) -> JobId: ...

    @property
    def placement(self) -> Placement: ...

    @property
    def protected_until(self) -> float | None: ...


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
    The simulator calls this once per event, so the per-job path is kept lean:
    a kept running job costs a counter and a dict lookup.
    """
    st = _State(snapshot, ranked, preemptive)
    out = Walk()
    keep, preempt, reasons = out.keep, out.preempt, out.reasons
    blocked_by: JobId | None = None
    memo = FailureMemo(placement)
    evicted, pinned = st.evicted, st.pinned
    n_visited = 0  # running jobs on offer visited so far (synced into ``st`` when used)
    for j in ranked:
        if j.state is _RUNNING:
            # A running job's turn: it keeps its GPUs unless some were handed out
            # above it, in which case it was evicted then.
            if not preemptive or j.placement is None or (pinned and j.job_id in pinned):
                keep.append(j.job_id)
            else:
                n_visited += 1
                if evicted and j.job_id in evicted:
                    st.visit_evicted(j.job_id)
                    preempt.append(j.job_id)
                    reasons[j.job_id] = f"preempted by higher-priority job {evicted[j.job_id]}"
                else:
                    keep.append(j.job_id)
            continue

        # PENDING job.
        if blocked_by is not None:
            reasons[j.job_id] = f"blocked behind job {blocked_by} ({policy_name or 'fifo'})"
            continue
        st.n_visited = n_visited
        if j.num_gpus <= 0:
            reasons[j.job_id] = f"asks for {j.num_gpus} GPUs: teiresias schedules GPU jobs only"
            continue
        got = place_pending(j, st, placement, memo, reasons)
        if got is None:
            if head_of_line_blocking:
                blocked_by = j.job_id
            continue
        st.start(j.job_id, got)
        out.start[j.job_id] = got
    return out


class Offer(Protocol):
    """What a walk's GPU bookkeeping offers a pending job at its turn (``_State`` here, the kept
    walk's in ``teiresias.policy.kept``): the idle GPUs, and the running jobs ranked below it
    that still hold theirs (the unvisited holders), which preemption can hand out."""

    cluster: Cluster
    idle: dict[str, int]
    idle_total: int
    version: int  # moves on at every eviction (idle GPUs only shrink between two)

    def held_total(self) -> int: ...

    def n_unvisited_holders(self) -> int: ...

    def unvisited_holders(self) -> Iterator[_Placed]: ...

    def avail(self) -> dict[str, int]: ...


class FailureMemo:
    """Placements that failed in this walk, so 10,000 waiting jobs of a few shapes cost a few
    placements: feasibility depends only on the job's shape (``placement.job_key``) and the
    free map. ``idle`` only shrinks between evictions (hence the version); idle + unvisited
    held GPUs only ever shrinks during a walk."""

    __slots__ = ("job_key", "idle_failed", "avail_failed")

    def __init__(self, placement: PlacementPolicy) -> None:
        self.job_key = getattr(placement, "job_key", None)
        self.idle_failed: dict[object, int] = {}
        self.avail_failed: set[object] = set()


def place_pending(
    j: Job, st: Offer, placement: PlacementPolicy, memo: FailureMemo, reasons: dict[JobId, str]
) -> Placement | None:
    """Where pending job ``j`` (asking for GPUs) starts at its turn of the walk, or None (its
    reason written): on idle GPUs if it fits there, else on idle GPUs plus those of the fewest
    lowest-ranked running jobs (Tiresias Pseudocode 2)."""
    need = j.num_gpus
    idle_total = st.idle_total
    held_total = st.held_total()
    if idle_total + held_total < need:
        # Not enough GPUs even counting every lower-ranked running job's.
        reasons[j.job_id] = f"waiting for {need} GPUs, {idle_total} free"
        return None
    key = memo.job_key(j) if memo.job_key is not None else None
    got = None
    if idle_total >= need and (key is None or memo.idle_failed.get(key) != st.version):
        got = placement.place(j, st.idle, st.cluster)
        if got is None and key is not None:
            memo.idle_failed[key] = st.version
    if got is None and held_total > 0 and (key is None or key not in memo.avail_failed):
        got = _place_with_eviction(j, st, placement)
        if got is None and key is not None:
            memo.avail_failed.add(key)
    if got is None:
        if idle_total < need:
            reasons[j.job_id] = f"waiting for {need} GPUs, {idle_total} free"
        else:
            reasons[j.job_id] = (
                f"waiting for {need} GPUs: {idle_total} free but not placeable ({placement.name} placement)"
            )
    return got


_BASE: dict[int, tuple[object, dict[str, int]]] = {}


def _base_gpus(cluster: Cluster) -> dict[str, int]:
    """GPUs per node of a cluster, computed once per Cluster object (they are immutable)."""
    got = _BASE.get(id(cluster))
    if got is None or got[0] is not cluster:
        got = (cluster, {n.name: n.gpus for n in cluster.nodes})
        if len(_BASE) > 64:
            _BASE.clear()
        _BASE[id(cluster)] = got
    return got[1]


class _State:
    """GPU bookkeeping of one walk.

    ``idle[n]``: GPUs on node n that nobody holds now or was given this round.
    ``evictable``: running jobs in rank order; the first ``n_visited`` rank
    above the job being placed, the rest (unless evicted) are what preemption
    can hand out. Their GPU counts are kept as prefix sums so the walk does
    no per-node work for a running job that keeps its GPUs.
    Invariant: idle >= 0 everywhere; a job whose GPUs are handed out is evicted
    at once, so the rest of its GPUs become idle (and ``version`` moves on).
    """

    def __init__(self, snapshot: Snapshot, ranked: Sequence[Job], preemptive: bool) -> None:
        self.cluster = snapshot.cluster
        self.version = 0
        self.evicted: dict[JobId, JobId] = {}  # victim -> the job it made room for
        self._evicted_gpus: dict[JobId, int] = {}
        self.n_visited = 0
        self.n_evicted_unvisited = 0
        self._evicted_unvisited_gpus = 0
        self._holders: dict[str, list[_Placed]] | None = None
        self._avail: dict[str, int] | None = None
        self._avail_visited = 0
        running: list[_Placed] = []
        idle = dict(_base_gpus(self.cluster))
        # prefix[i] = GPUs held by running[:i] (one loop: this runs every round).
        prefix = [0]
        held = 0
        now = snapshot.now
        protected = False
        for j in ranked:
            if j.state is not _RUNNING:
                continue
            p = j.placement
            if p is None:
                continue
            # Its placement p is set, which mypy cannot carry from j.placement over to j itself
            # (a TypeIs function or a cast would cost a call per running job, every round).
            running.append(j)  # type: ignore[arg-type]
            for a in p.allocations:
                held += a.gpus
                if a.node in idle:
                    idle[a.node] -= a.gpus
                else:
                    idle[a.node] = 0  # a running job on a node outside the cluster spec
            prefix.append(held)
            if j.protected_until is not None and j.protected_until > now:
                protected = True
        unavailable = snapshot.unavailable
        if type(unavailable) is dict and len(unavailable) == len(idle) and list(unavailable) == list(idle):
            # Every node, in node order (the simulator's map of held GPUs): subtracted in C.
            idle = dict(zip(idle, map(sub, idle.values(), unavailable.values())))
        else:
            for name, u in unavailable.items():
                if name in idle:
                    idle[name] -= u
        # A node where managed jobs hold more GPUs than are usable (DRAINing, or
        # GPUs taken outside the managed partitions) has nothing to give: its jobs
        # are "pinned", kept whatever their rank and never on offer for
        # preemption, because evicting them would free nothing usable there. So is
        # a job its owner protects for now (Job.protected_until: a minimum run
        # time, a job that cannot checkpoint), which only the owner sets.
        self.pinned: set[JobId] = set()
        if protected or (idle and min(idle.values()) < 0):
            over = {name for name, v in idle.items() if v < 0}
            for name in over:
                idle[name] = 0
            kept_running: list[_Placed] = []
            kept_prefix = [0]
            for i, v in enumerate(running):
                pu = v.protected_until
                if (pu is not None and pu > now) or any(a.node in over for a in v.placement.allocations):
                    self.pinned.add(v.job_id)
                else:
                    kept_running.append(v)
                    kept_prefix.append(kept_prefix[-1] + prefix[i + 1] - prefix[i])
            running, prefix = kept_running, kept_prefix
        self.idle = idle
        self.idle_total = sum(idle.values())
        self.evictable: list[_Placed] = running if preemptive else []
        self._prefix = prefix if preemptive else [0]

    def held_total(self) -> int:
        """GPUs of running jobs ranked below the current one that still hold them."""
        prefix = self._prefix
        return prefix[-1] - prefix[self.n_visited] - self._evicted_unvisited_gpus

    def n_unvisited_holders(self) -> int:
        """Running jobs ranked below the current one that still hold their GPUs."""
        return len(self.evictable) - self.n_visited - self.n_evicted_unvisited

    def unvisited_holders(self) -> Iterator[_Placed]:
        """Those jobs, lowest priority first."""
        evicted = self.evicted
        return (v for v in reversed(self.evictable[self.n_visited :]) if v.job_id not in evicted)

    def avail(self) -> dict[str, int]:
        """Idle GPUs plus those of every running job ranked below the current one.

        Built on first use, then brought up to date: jobs kept since the last
        call stop being on offer (an eviction moves GPUs from a holder to idle,
        which leaves this sum unchanged; a start is subtracted in ``start``).
        """
        if self._avail is None:
            cand = dict(self.idle)
            for v in self.unvisited_holders():
                for a in v.placement.allocations:
                    cand[a.node] += a.gpus
            self._avail = cand
        else:
            cand = self._avail
            for v in self.evictable[self._avail_visited : self.n_visited]:
                if v.job_id not in self.evicted:
                    for a in v.placement.allocations:
                        cand[a.node] -= a.gpus
        self._avail_visited = self.n_visited
        return cand

    def visit_evicted(self, job_id: JobId) -> None:
        self.n_evicted_unvisited -= 1
        self._evicted_unvisited_gpus -= self._evicted_gpus[job_id]

    def start(self, job_id: JobId, placement: Placement) -> None:
        """Start a job, evicting the lowest-priority holders of GPUs beyond the idle ones."""
        idle = self.idle
        for a in placement.allocations:
            if idle[a.node] >= a.gpus:
                continue
            node_holders = self._holders_on(a.node)
            while idle[a.node] < a.gpus:
                # Lowest priority left on this node. Entries of jobs visited since
                # the lists were built sit at the front (rank order) and are never
                # reached: the placement fit within idle plus the unvisited holders.
                victim = node_holders.pop()
                if victim.job_id not in self.evicted:
                    self._evict(victim, job_id)
        self.idle_total -= hand_out(placement, idle, self._avail)

    def _holders_on(self, node: str) -> list[_Placed]:
        if self._holders is None:
            # Built at the first eviction of the walk: unvisited holders per node, rank order.
            holders: dict[str, list[_Placed]] = {}
            for v in self.evictable[self.n_visited :]:
                if v.job_id not in self.evicted:
                    for a in v.placement.allocations:
                        holders.setdefault(a.node, []).append(v)
            self._holders = holders
        return self._holders.setdefault(node, [])

    def _evict(self, victim: _Placed, by: JobId) -> None:
        self.evicted[victim.job_id] = by
        self.version += 1
        size = 0
        for a in victim.placement.allocations:
            self.idle[a.node] += a.gpus
            size += a.gpus
        self.idle_total += size
        self._evicted_gpus[victim.job_id] = size
        self.n_evicted_unvisited += 1
        self._evicted_unvisited_gpus += size


def hand_out(placement: Placement, idle: dict[str, int], avail: dict[str, int] | None) -> int:
    """Take a started job's GPUs out of a walk's idle map (and its available map once built);
    how many it took."""
    taken = 0
    for a in placement.allocations:
        idle[a.node] -= a.gpus
        taken += a.gpus
        if avail is not None:
            avail[a.node] -= a.gpus
    return taken


def _place_with_eviction(job: Job, st: Offer, placement: PlacementPolicy) -> Placement | None:
    """Place ``job`` on idle GPUs plus those of the fewest lowest-priority running jobs.

    First on everything lower-ranked jobs hold (if that fails, nothing can
    help); then on idle GPUs plus the m lowest-priority running jobs' GPUs,
    with the smallest m that works found by galloping + binary search
    (feasibility only grows with m), so the jobs whose GPUs may be taken are
    the lowest-ranked ones.
    """
    full = placement.place(job, st.avail(), st.cluster)
    if full is None:
        return None
    # Victims lowest priority first, listed lazily: usually only a few are needed.
    victims: list[_Placed] = []
    source = st.unvisited_holders()

    def first(m: int) -> list[_Placed]:
        while len(victims) < m:
            victims.append(next(source))
        return victims[:m]

    # Idle plus the first ``grown[0]`` victims: galloping only adds victims, so each probe adds
    # to the last one's map (placements never change the map they are given).
    grown: list[Any] = [0, dict(st.idle)]

    def attempt(m: int) -> Placement | None:
        if m >= grown[0]:
            cand = grown[1]
            first(m)
            for v in victims[grown[0] : m]:
                for a in v.placement.allocations:
                    cand[a.node] += a.gpus
            grown[0] = m
        else:
            cand = dict(st.idle)
            for v in victims[:m]:
                for a in v.placement.allocations:
                    cand[a.node] += a.gpus
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
    order = tuple([j.job_id for j in ranked])
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
