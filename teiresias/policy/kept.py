"""The allocation walk over a ranking its owner keeps between rounds (Tiresias Pseudocode 2).

The plain walk (``teiresias.policy.allocate.walk``) is handed every job of a
round, ranked, and visits each: under a backlog that is some 800 running jobs
per round to decide for ~100 waiting ones, most of which cannot start. Yet a
running job matters to a round only through its rank and the GPUs it holds,
and both change only when it starts, stops, or its key moves (a demotion).

So an owner (the simulator) keeps the running jobs in a ``KeptRanking``: in
the order of the policy's ``rank_keys`` (``KeyRanked``: the order ``decide``
ranks them in), with their GPUs per node and their GPU counts in that order,
updated at those events only. A round then hands the policy the waiting jobs
alone (``decide_kept``); the policy ranks them, and ``walk_kept`` visits only
them, finding each one's place among the running jobs by bisection:

- the running jobs ranked above a waiting job are those before its place;
  the GPUs of those below, still held, are all kept GPUs less those above it
  (summed as the walk moves down) and less what this round evicted below it
  (a heap of evicted positions);
- idle + lower-ranked held GPUs per node (``avail``), which a job that must
  preempt is placed on first, is built once per round from whichever side of
  the place is shorter, then kept up to date as in the plain walk;
- the victims on a node are its lowest-ranked holders, found by scanning the
  ranking from its end only as far as evictions reach.

Every decision is the plain walk's: the same code places each waiting job
(``place_pending``, ``_place_with_eviction``) on the same idle and available
GPUs, evicting the same jobs. A node whose running jobs hold more GPUs than it
has, a kept job its owner still protects (``Job.protected_until`` after now;
the plain walk pins both) or a running job in the snapshot sends the round to
the plain walk over the merged ranking (the simulator keeps no ranking at all
when it protects jobs: ``SimulationOptions.min_run``). The randomized test
``tests/unit/test_walk_kept.py`` compares the two on random snapshots for
every policy option, so they cannot drift.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping, Sequence
from operator import add, itemgetter
from typing import Any

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.allocate import FailureMemo, Walk, hand_out, place_pending, walk
from teiresias.policy.base import PlacementPolicy

_PENDING = JobState.PENDING


class KeptRanking:
    """The running jobs of a cluster in rank order, kept by an owner between rounds, and the
    waiting jobs whose rank cannot move while they wait.

    ``add(key, job)`` when a job starts running (its key from the policy's
    ``rank_keys``; ``rekey`` when it is asked again), ``discard(job_id)`` when
    it stops; ``add_waiting(key, job)`` for a waiting job whose key holds for
    ever while it waits (``until`` inf: never promoted either),
    ``discard_waiting(job_id)`` when it starts, ends or its key moves. A running
    job's placement must not change while it is kept. Holds
    the keys (sorted; each ends in its job id, so they are unique), the jobs in
    that order, the GPUs held per node and free per node (the cluster's GPUs
    minus those held, in node order). Pure bookkeeping: no clock, no I/O.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.keys: list[tuple[Any, ...]] = []
        self.jobs: list[Job] = []
        self.sizes: list[int] = []  # GPUs of each kept running job, in rank order
        self.total = 0  # their sum
        self._key_of: dict[JobId, tuple[Any, ...]] = {}
        self.waiting_keys: list[tuple[Any, ...]] = []
        self.waiting_jobs: list[Job] = []
        self._waiting_key_of: dict[JobId, tuple[Any, ...]] = {}
        # What the last walk learned, for the next (``walk_kept``): shape -> the key of the
        # waiting job where it failed with every lower-ranked GPU on offer; running jobs that
        # gave GPUs back or moved down since, as (key before, key after; None: stopped); the
        # waiting keys of the jobs it started; and what it was walked with.
        self.failed: dict[object, tuple[Any, ...]] = {}
        self._released: list[tuple[tuple[Any, ...], tuple[Any, ...] | None]] = []
        self._started: dict[JobId, tuple[Any, ...]] = {}
        self._failed_with: tuple[object, dict[str, int]] | None = None
        # Both in node order with every node (maps of the cluster's nodes are summed in C).
        self.free: dict[str, int] = {n.name: n.gpus for n in cluster.nodes}
        self.held: dict[str, int] = {n.name: 0 for n in cluster.nodes}
        self.free_total = cluster.total_gpus  # sum of ``free``
        self.overdrawn = 0  # nodes whose kept jobs hold more GPUs than they have
        self.foreign = 0  # kept allocations on nodes the cluster does not have
        # Kept jobs their owner protects (Job.protected_until set): the plain walk pins a job
        # while its protection lasts, which this walk does not model (walk_kept hands it over).
        self.protected: dict[JobId, float] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._key_of or job_id in self._waiting_key_of

    def add_waiting(self, key: tuple[Any, ...], job: Job) -> None:
        """Keep a waiting job under its rank key, which must hold for as long as it waits."""
        if job.state is not _PENDING or job.job_id in self:
            raise ValueError(f"job {job.job_id}: only a waiting job not kept yet can be added as waiting")
        i = bisect.bisect_left(self.waiting_keys, key)
        self.waiting_keys.insert(i, key)
        self.waiting_jobs.insert(i, job)
        self._waiting_key_of[job.job_id] = key

    def add(self, key: tuple[Any, ...], job: Job) -> None:
        """Keep a running job under its rank key (which ends in its job id)."""
        p = job.placement
        if p is None or job.job_id in self:
            raise ValueError(f"job {job.job_id}: only a running job not kept yet can be added")
        started_at = self._started.pop(job.job_id, None)
        if started_at is not None and key > started_at:
            self._gave_back(started_at, key)  # started above some failure, now ranked lower
        i = bisect.bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.jobs.insert(i, job)
        size = 0
        free, held = self.free, self.held
        for a in p.allocations:
            size += a.gpus
            if a.node in free:
                f = free[a.node]
                free[a.node] = f - a.gpus
                held[a.node] += a.gpus
                self.free_total -= a.gpus
                if f >= 0 > f - a.gpus:
                    self.overdrawn += 1
            else:
                self.foreign += 1
        self.sizes.insert(i, size)
        self.total += size
        self._key_of[job.job_id] = key
        if job.protected_until is not None:
            self.protected[job.job_id] = job.protected_until

    def rekey(self, job_id: JobId, key: tuple[Any, ...]) -> None:
        """Move a kept running job to its new key (asked again: its key moved, or may have);
        its GPUs stay where they are. In place when its rank among the others is unchanged."""
        old = self._key_of[job_id]
        if old == key:
            return
        if key > old and self.failed:
            self._gave_back(old, key)
        keys = self.keys
        i = bisect.bisect_left(keys, old)
        self._key_of[job_id] = key
        if (i == 0 or keys[i - 1] < key) and (i + 1 == len(keys) or key < keys[i + 1]):
            keys[i] = key
            return
        del keys[i]
        job, size = self.jobs.pop(i), self.sizes.pop(i)
        i = bisect.bisect_left(keys, key)
        keys.insert(i, key)
        self.jobs.insert(i, job)
        self.sizes.insert(i, size)

    def rekey_many(self, items: Sequence[tuple[JobId, tuple[Any, ...]]]) -> None:
        """``rekey`` of many kept running jobs at once (an index that moves with attained
        service asks every round): the stretch of the ranking they occupy is sorted again in
        one go, and only a job whose new key leaves that stretch is moved by bisection."""
        if len(items) < 8:
            for jid, key in items:
                self.rekey(jid, key)
            return
        key_of, keys, jobs, sizes = self._key_of, self.keys, self.jobs, self.sizes
        moved: dict[JobId, tuple[Any, ...]] = {}
        lowest = highest = None
        for jid, key in items:
            old = key_of[jid]
            if old == key:
                continue
            moved[jid] = key
            key_of[jid] = key
            if key > old and self.failed:
                self._gave_back(old, key)
            if lowest is None or old < lowest:
                lowest = old
            if highest is None or old > highest:
                highest = old
        if lowest is None or highest is None:
            return
        lo, hi = bisect.bisect_left(keys, lowest), bisect.bisect_right(keys, highest)
        left = keys[lo - 1] if lo > 0 else None
        right = keys[hi] if hi < len(keys) else None
        stay: list[tuple[tuple[Any, ...], Job, int]] = []
        out: list[tuple[tuple[Any, ...], Job, int]] = []
        for i in range(lo, hi):
            j = jobs[i]
            k = moved.get(j.job_id)
            if k is None:
                stay.append((keys[i], j, sizes[i]))
            elif (left is None or left < k) and (right is None or k < right):
                stay.append((k, j, sizes[i]))
            else:
                out.append((k, j, sizes[i]))
        stay.sort(key=itemgetter(0))  # keys are unique: jobs are never compared
        keys[lo:hi] = [t[0] for t in stay]
        jobs[lo:hi] = [t[1] for t in stay]
        sizes[lo:hi] = [t[2] for t in stay]
        for k, j, size in out:
            i = bisect.bisect_left(keys, k)
            keys.insert(i, k)
            jobs.insert(i, j)
            sizes.insert(i, size)

    def discard(self, job_id: JobId) -> bool:
        """Stop keeping a running job (it stopped running); whether it was kept."""
        started_at = self._started.pop(job_id, None)
        key = self._key_of.pop(job_id, None)
        if key is None:
            if started_at is not None:
                self._gave_back(started_at, None)  # started by the last walk, stopped before it was kept
            return False
        if self.failed:
            self._gave_back(key, None)
        self.protected.pop(job_id, None)
        i = bisect.bisect_left(self.keys, key)
        job = self.jobs[i]
        self.total -= self.sizes[i]
        del self.keys[i], self.jobs[i], self.sizes[i]
        free, held = self.free, self.held
        assert job.placement is not None  # set while kept (add checked it)
        for a in job.placement.allocations:
            if a.node in free:
                f = free[a.node]
                free[a.node] = f + a.gpus
                held[a.node] -= a.gpus
                self.free_total += a.gpus
                if f < 0 <= f + a.gpus:
                    self.overdrawn -= 1
            else:
                self.foreign -= 1
        return True

    def discard_waiting(self, job_id: JobId) -> bool:
        """Stop keeping a waiting job (it started, ended, or its key moved); whether it was kept."""
        key = self._waiting_key_of.pop(job_id, None)
        if key is None:
            return False
        i = bisect.bisect_left(self.waiting_keys, key)
        del self.waiting_keys[i], self.waiting_jobs[i]
        return True

    def _gave_back(self, old: tuple[Any, ...], new: tuple[Any, ...] | None) -> None:
        """A running job ranked at ``old`` holds its GPUs there no longer: it is ranked at ``new``
        now, or stopped (None)."""
        if len(self._released) >= 256:
            self.failed, self._released = {}, []  # many changes: forget the failures instead
        else:
            self._released.append((old, new))

    def failures_for(self, placement: PlacementPolicy, unavailable: Mapping[str, int]) -> dict[object, tuple[Any, ...]]:
        """The last walk's failures that still hold, and a fresh start for the next.

        A shape failed at key k with every GPU not held above k on offer (idle
        ones and those of lower-ranked running jobs), and a monotone placement
        could not place it there. If since then no running job ranked above k
        gave GPUs back or moved below k (``_released``; a start above k only
        takes more), no more GPUs are on offer at k now, nor further down the
        ranking: every job of that shape ranked at or below k fails again.
        """
        failed = self.failed
        if self._failed_with is None or self._failed_with[0] is not placement or self._failed_with[1] != unavailable:
            failed = {}
        elif self._released and failed:
            released = self._released
            failed = {
                shape: k
                for shape, k in failed.items()
                if not any(old < k and (new is None or k < new) for old, new in released)
            }
        self._released = []
        self._started = {}
        self._failed_with = (placement, dict(unavailable))
        self.failed = failed
        return failed


class _KeptState:
    """The walk's GPU bookkeeping over a KeptRanking (the ``Offer`` of allocate.place_pending).

    ``pos``: how many running jobs rank above the waiting job whose turn it is
    (they are "visited"); the others are unvisited. Evictions are recorded by
    position; the kept ranking itself is never changed.
    """

    def __init__(self, snapshot: Snapshot, kept: KeptRanking) -> None:
        self.cluster = snapshot.cluster
        idle = dict(kept.free)
        # Over-committed nodes (the plain walk pins their jobs) or foreign nodes: not handled here.
        if snapshot.unavailable:
            for name, u in snapshot.unavailable.items():
                if name in idle:
                    idle[name] -= u
            self.exact = kept.foreign == 0 and (not idle or min(idle.values()) >= 0)
            self.idle_total = sum(idle.values())
        else:
            self.exact = kept.foreign == 0 and kept.overdrawn == 0
            self.idle_total = kept.free_total
        self.idle = idle
        self.version = 0
        self._kept = kept
        self._jobs = kept.jobs
        self._sizes = kept.sizes
        self._total = kept.total
        self.above = 0  # GPUs of the running jobs ranked above the current place
        self.pos = 0
        self.evicted: dict[JobId, JobId] = {}  # victim -> the job it made room for
        self._victims: list[int] = []  # positions of the evicted jobs
        self._unvisited: list[tuple[int, int]] = []  # heap: (position, GPUs) of evicted jobs not visited yet
        self._unvisited_gpus = 0
        self._avail: dict[str, int] | None = None
        self._avail_pos = 0
        # Lowest-ranked holders per node, positions found by scanning the ranking from its end.
        self._tail = len(self._jobs)
        self._holders: dict[str, list[int]] = {}
        self._next_holder: dict[str, int] = {}

    def advance(self, pos: int) -> None:
        """The turn of a waiting job with ``pos`` running jobs ranked above it (never decreasing)."""
        self.above += sum(self._sizes[self.pos : pos])
        self.pos = pos
        heap = self._unvisited
        while heap and heap[0][0] < pos:
            self._unvisited_gpus -= heapq.heappop(heap)[1]

    def held_total(self) -> int:
        """GPUs of running jobs ranked below the current one that still hold them."""
        return self._total - self.above - self._unvisited_gpus

    def n_unvisited_holders(self) -> int:
        return len(self._jobs) - self.pos - len(self._unvisited)

    def unvisited_holders(self) -> Iterator[Any]:
        """Running jobs ranked below the current one that still hold their GPUs, lowest first."""
        jobs, evicted = self._jobs, self.evicted
        return (jobs[i] for i in range(len(jobs) - 1, self.pos - 1, -1) if jobs[i].job_id not in evicted)

    def avail(self) -> dict[str, int]:
        """Idle GPUs plus those of every running job ranked below the current one.

        Built on first use from the shorter side of the current place (the
        jobs below it, or every kept GPU less the jobs above it and the
        evicted ones below), then kept up to date as the plain walk's: jobs
        passed since stop being on offer; a start is subtracted in ``start``.
        """
        cand = self._avail
        pos, jobs, evicted = self.pos, self._jobs, self.evicted
        if cand is not None and pos - self._avail_pos > min(pos, len(jobs) - pos):
            cand = None  # building it again costs less than moving it that far
        if cand is None:
            idle = self.idle
            if pos < len(jobs) - pos:
                # Idle plus every kept GPU (both maps in node order: summed in C), less those above.
                cand = dict(zip(idle, map(add, idle.values(), self._kept.held.values())))
                for v in jobs[:pos]:
                    for a in v.placement.allocations:  # type: ignore[union-attr]  # kept: running
                        cand[a.node] -= a.gpus
                for i in self._victims:
                    if i >= pos:  # evicted, unvisited: its GPUs are idle already
                        for a in jobs[i].placement.allocations:  # type: ignore[union-attr]
                            cand[a.node] -= a.gpus
            else:
                cand = dict(idle)
                for v in jobs[pos:]:
                    if v.job_id not in evicted:
                        for a in v.placement.allocations:  # type: ignore[union-attr]
                            cand[a.node] += a.gpus
            self._avail = cand
        else:
            for v in jobs[self._avail_pos : pos]:
                if v.job_id not in evicted:
                    for a in v.placement.allocations:  # type: ignore[union-attr]
                        cand[a.node] -= a.gpus
        self._avail_pos = pos
        return cand

    def start(self, job_id: JobId, placement: Placement) -> None:
        """Start a job, evicting the lowest-priority holders of GPUs beyond the idle ones."""
        idle = self.idle
        for a in placement.allocations:
            while idle[a.node] < a.gpus:
                self._evict(self._lowest_holder(a.node), job_id)
        self.idle_total -= hand_out(placement, idle, self._avail)

    def _lowest_holder(self, node: str) -> int:
        """The position of the lowest-ranked running job on ``node`` not evicted yet.

        Never above the current place: the placement fit within idle plus the
        unvisited holders, whose lowest-ranked ones on this node it takes.
        """
        jobs, evicted, holders = self._jobs, self.evicted, self._holders
        lst = holders.setdefault(node, [])
        k = self._next_holder.get(node, 0)
        while True:
            while k < len(lst):
                i = lst[k]
                k += 1
                if jobs[i].job_id not in evicted:
                    self._next_holder[node] = k
                    return i
            t = self._tail - 1
            if t < self.pos:
                raise AssertionError(f"no running job left to evict on node {node}")
            self._tail = t
            for a in jobs[t].placement.allocations:  # type: ignore[union-attr]  # kept: running
                holders.setdefault(a.node, []).append(t)

    def _evict(self, i: int, by: JobId) -> None:
        victim = self._jobs[i]
        self.evicted[victim.job_id] = by
        self._victims.append(i)
        self.version += 1
        size = 0
        for a in victim.placement.allocations:  # type: ignore[union-attr]  # kept: running
            self.idle[a.node] += a.gpus
            size += a.gpus
        self.idle_total += size
        heapq.heappush(self._unvisited, (i, size))
        self._unvisited_gpus += size


def walk_kept(
    snapshot: Snapshot,
    ranked: Sequence[Job],
    keys: Sequence[tuple[Any, ...]],
    kept: KeptRanking,
    placement: PlacementPolicy,
    *,
    policy_name: str = "",
) -> Walk:
    """The plain preemptive walk's decisions for the waiting jobs, ``ranked`` (highest priority
    first, ``keys[i]`` the rank key of ``ranked[i]``) and those ``kept`` holds, among the
    running jobs ``kept`` holds (Tiresias Pseudocode 2; module docstring).

    ``Walk.keep`` is left empty (the kept jobs are the owner's; every one not in
    ``preempt`` keeps its GPUs); ``preempt`` lists the evicted jobs in rank order,
    as the plain walk visits them. Waiting jobs that cannot start are passed over
    without a reason where the plain walk would try in vain: once no GPU is left
    for anyone (none idle, none held below) the walk stops, and with a monotone
    placement (``MonotonePlacement``) a job of a shape that already failed with
    every lower-ranked job's GPUs on offer fails again (what is on offer only
    shrinks down the ranking), so it is not tried; nor, in the next rounds, until
    GPUs ranked above its failure are given back (``KeptRanking.failures_for``).
    """
    st = _KeptState(snapshot, kept)
    monotone = getattr(placement, "monotone", False) is True
    failed = kept.failures_for(placement, snapshot.unavailable) if monotone else {}
    protected = kept.protected
    if (
        not st.exact
        or (protected and max(protected.values()) > snapshot.now)
        or any(j.state is not _PENDING for j in ranked)
    ):
        failed.clear()
        merged = [
            j
            for _, j in heapq.merge(
                zip(kept.keys, kept.jobs),
                zip(kept.waiting_keys, kept.waiting_jobs),
                zip(keys, ranked),
                key=itemgetter(0),
            )
        ]
        return walk(snapshot, merged, placement, preemptive=True, policy_name=policy_name)
    out = Walk()
    reasons = out.reasons
    memo = FailureMemo(placement)
    kkeys = kept.keys
    n, total = len(kkeys), kept.total
    job_key = memo.job_key
    if job_key is None:
        failed.clear()
    dead = memo.avail_failed if job_key is not None and monotone else None
    started = kept._started
    wkeys, wjobs = kept.waiting_keys, kept.waiting_jobs
    nr, nw = len(ranked), len(wkeys)
    i = w = lo = 0
    while i < nr or w < nw:
        # The next waiting job in rank order, from the snapshot's or the kept ones.
        if w < nw and (i == nr or wkeys[w] < keys[i]):
            j, k = wjobs[w], wkeys[w]
            w += 1
        else:
            j, k = ranked[i], keys[i]
            i += 1
        need = j.num_gpus
        if need <= 0:
            reasons[j.job_id] = f"asks for {need} GPUs: teiresias schedules GPU jobs only"
            continue
        if dead is not None:
            shape = job_key(j)  # type: ignore[misc]  # dead is set only with a job_key
            if shape in dead:
                continue  # failed above, with more on offer
            at = failed.get(shape)
            if at is not None and k >= at:
                continue  # failed there in an earlier round, with no less on offer
        if lo < n:
            pos = bisect.bisect_left(kkeys, k, lo)
            if pos != lo:
                lo = pos
                st.advance(lo)
        cap = st.idle_total + total - st.above - st._unvisited_gpus
        if cap < need:
            if cap <= 0:
                break  # none idle, none held below: nobody after this one can start either
            reasons[j.job_id] = f"waiting for {need} GPUs, {st.idle_total} free"
            continue
        tried = len(memo.avail_failed)
        got = place_pending(j, st, placement, memo, reasons)
        if got is not None:
            nv = len(st._victims)
            st.start(j.job_id, got)
            out.start[j.job_id] = got
            started[j.job_id] = k
            if failed and len(st._victims) > nv:
                # Evicted jobs ranked above an earlier round's failure give GPUs back there.
                top = min(kkeys[v] for v in st._victims[nv:])
                for sh in [sh for sh, at in failed.items() if at > top]:
                    del failed[sh]
        elif dead is not None and len(memo.avail_failed) > tried:
            failed[shape] = k
    evicted, jobs = st.evicted, kept.jobs
    for v in sorted(st._victims):
        jid = jobs[v].job_id
        out.preempt.append(jid)
        reasons[jid] = f"preempted by higher-priority job {evicted[jid]}"
    return out


def walk_ranked(
    snapshot: Snapshot,
    ranked: Sequence[Job],
    keys: Sequence[tuple[Any, ...]],
    kept: KeptRanking | None,
    placement: PlacementPolicy,
    *,
    policy_name: str = "",
) -> Walk:
    """The preemptive walk of a ``KeyRanked`` policy's ranking: the plain walk over ``ranked``
    (every job of the snapshot) when ``kept`` is None, else ``walk_kept``."""
    if kept is None:
        return walk(snapshot, ranked, placement, preemptive=True, policy_name=policy_name)
    return walk_kept(snapshot, ranked, keys, kept, placement, policy_name=policy_name)
