"""One round's working view of the cluster: groups, per-node pools and the GPUs left.

Every mechanism module reads and updates a ``Round``; the policy turns it into
a Plan at the end. Pure: built from a Snapshot, never writes a Job.

Two kinds of sharing units:

- a ``Group``: multi-GPU jobs on one set of GPUs (§3.1), alone, time-sliced or
  packed, as the paper's jobs of 2, 4, ... GPUs;
- a ``Pool``: the 1-GPU jobs of one node that are bound to GPUs by index
  (``Job.bound_gpus``: the shard types live), time-sliced across the node's
  GPUs (§4.1 "six 1-GPU jobs time-sharing 4 GPUs", Figure 9). A job bound to
  one GPU runs only there; a job bound to several (it joined an over-subscribed
  node) runs on whichever of them the rotation gives it.

GPUs are tracked by index per node (``idle``): where a job has no indices
(a policy's count-only placement, an owner that does not know them) the lowest
free ones are assumed, as Slurm's first fit would give them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teiresias.domain import Allocation, Colocation, Job, JobId, Placement, Snapshot


def is_floater(j: Job) -> bool:
    """Bound to several GPUs of its node: it may run on any of them (Job.bound_gpus)."""
    return len(j.bound_gpus) > 1


def in_pool(j: Job) -> bool:
    """A running 1-GPU job on one node, bound to GPUs by index: it time-slices per node."""
    return bool(j.bound_gpus) and j.num_gpus == 1 and j.placement is not None and j.placement.num_nodes == 1


@dataclass
class Group:
    """Jobs on one set of GPUs (Gandiva §3.1): alone, time-sliced, or packed.

    ``members`` in id order; ``placement`` is what each of them holds.
    """

    members: list[Job]
    placement: Placement
    packed: bool

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.placement.nodes

    @property
    def gpus(self) -> int:
        return self.placement.num_gpus


@dataclass
class Pool:
    """The pool jobs of one node (``in_pool``) and the GPU indices they may use."""

    node: str
    gpus: list[int]
    members: list[Job]

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class Round:
    """Mutable state of one decide(): who runs after the plan and what is still idle."""

    snapshot: Snapshot
    free: dict[str, int]
    groups: list[Group]
    group_of: dict[JobId, Group]
    # After the plan: True = runs, False = suspended (RUNNING jobs only).
    runs: dict[JobId, bool]
    start: dict[JobId, Placement] = field(default_factory=dict)
    colocate: dict[JobId, Colocation] = field(default_factory=dict)
    pack: list[JobId] = field(default_factory=list)
    unpack: list[JobId] = field(default_factory=list)
    migrate: dict[JobId, Placement] = field(default_factory=dict)
    resize: dict[JobId, Placement] = field(default_factory=dict)
    notes: dict[JobId, str] = field(default_factory=dict)
    reasons: dict[JobId, str] = field(default_factory=dict)
    # Jobs a mechanism already changed this round: one decision per job and round.
    touched: set[JobId] = field(default_factory=set)
    # GPUs allocated per node counting every member of a group or pool (suspended ones
    # too), and each node's affinity (§4.1: the GPU count of the first job placed there).
    alloc: dict[str, int] = field(default_factory=dict)
    aff: dict[str, int] = field(default_factory=dict)
    # Pools: per node, the GPU each member runs on (or ran on last), which GPUs are idle,
    # and the members the plan moves to another GPU of their node (Plan.devices).
    pools: dict[str, Pool] = field(default_factory=dict)
    pool_of: dict[JobId, Pool] = field(default_factory=dict)
    device: dict[JobId, int] = field(default_factory=dict)
    devices: dict[JobId, int] = field(default_factory=dict)
    packed: dict[JobId, bool] = field(default_factory=dict)
    idle: dict[str, list[int]] = field(default_factory=dict)
    # GPUs a floater holds a shard of: live, Slurm gives no whole GPU there (a gpu job).
    shard_held: dict[str, set[int]] = field(default_factory=dict)

    # ------------------------------------------------------------ GPUs by index
    def _sync(self, node: str) -> None:
        self.free[node] = len(self.idle.get(node, []))

    def whole_free(self, node: str) -> int:
        """Idle GPUs of ``node`` a job asking whole GPUs can get (none a floater holds a shard of)."""
        held = self.shard_held.get(node, set())
        return sum(1 for i in self.idle.get(node, []) if i not in held)

    def fits(self, job: Job, node: str, gpus: int) -> bool:
        """``gpus`` idle GPUs of ``node`` for ``job``: its own index if it is bound to one,
        none that a floater holds a shard of for a job of several GPUs."""
        idle = self.idle.get(node, [])
        if len(job.bound_gpus) == 1:
            return gpus == 1 and job.bound_gpus[0] in idle
        if job.bound_gpus:
            return gpus == 1 and any(i in idle for i in job.bound_gpus)
        return (self.whole_free(node) if job.num_gpus > 1 else len(idle)) >= gpus

    def take(self, placement: Placement, job: Job | None = None) -> Placement:
        """Mark ``placement``'s GPUs busy; returns it naming them (its own indices, the job's
        bound one, else the lowest idle: Slurm's first fit)."""
        allocs = []
        for a in placement.allocations:
            idle = self.idle.setdefault(a.node, [])
            if a.gpu_ids:
                ids = a.gpu_ids
            elif job is not None and job.bound_gpus:
                ids = tuple(i for i in job.bound_gpus if i in idle)[: a.gpus]
            else:
                held = self.shard_held.get(a.node, set()) if job is not None and job.num_gpus > 1 else set()
                ids = tuple([i for i in idle if i not in held][: a.gpus])
            for i in ids:
                if i in idle:
                    idle.remove(i)
            self._sync(a.node)
            allocs.append(Allocation(a.node, a.gpus, tuple(sorted(ids))))
        return Placement(tuple(allocs))

    def release(self, node: str, gpu: int) -> None:
        """GPU ``gpu`` of ``node`` is idle again (a floater left it, its pinned job left)."""
        idle = self.idle.setdefault(node, [])
        if gpu not in idle:
            idle.append(gpu)
            idle.sort()
        self._sync(node)

    def occupy(self, node: str, gpu: int) -> None:
        idle = self.idle.setdefault(node, [])
        if gpu in idle:
            idle.remove(gpu)
        self._sync(node)

    # ------------------------------------------------------------ groups
    def add_group(self, g: Group) -> None:
        """A new group (a start on idle GPUs, a migration target): counted in alloc and affinity."""
        self.groups.append(g)
        for m in g.members:
            self.group_of[m.job_id] = g
        for a in g.placement.allocations:
            self.alloc[a.node] = self.alloc.get(a.node, 0) + a.gpus * g.size
            if not self.aff.get(a.node):
                self.aff[a.node] = g.members[0].num_gpus

    def join(self, g: Group, job: Job) -> None:
        """``job`` time-slices on ``g``'s GPUs."""
        g.members.append(job)
        self.group_of[job.job_id] = g
        for a in g.placement.allocations:
            self.alloc[a.node] = self.alloc.get(a.node, 0) + a.gpus

    def add_to_pool(self, job: Job, node: str, gpu: int, bound: tuple[int, ...]) -> None:
        """``job`` (a start, a migration target) runs on GPU ``gpu`` of ``node`` from now."""
        pool = self.pools.get(node)
        if pool is None:
            pool = self.pools[node] = Pool(node, self.pool_gpus(node), [])
        pool.members.append(job)
        self.pool_of[job.job_id] = pool
        self.device[job.job_id] = gpu
        self.runs[job.job_id] = True
        self.alloc[node] = self.alloc.get(node, 0) + 1
        if not self.aff.get(node):
            self.aff[node] = 1
        if len(bound) > 1:
            self.shard_held.setdefault(node, set()).update(bound)

    def pool_gpus(self, node: str) -> list[int]:
        """GPU indices of ``node`` not held by a group (whole-GPU jobs)."""
        held = {i for g in self.groups for a in g.placement.allocations if a.node == node for i in a.gpu_ids}
        return [i for i in range(self.snapshot.cluster.node(node).gpus) if i not in held]

    def load(self, node: str) -> float:
        """Allocated GPUs over the node's GPUs, suspended jobs included (§4.1 height before the ceiling)."""
        n = self.snapshot.cluster.node(node)
        if n.gpus <= 0:
            return float("inf")
        return self.alloc.get(node, 0) / n.gpus

    def height(self, node: str) -> int:
        """§4.1: ceil(allocated / GPUs) of a node; > 1 means it is time-sliced."""
        return -int(-self.load(node) // 1)


def _ids_of(a: Allocation, taken: set[int], size: int) -> tuple[int, ...]:
    """An allocation's GPU indices: its own, else the lowest not ``taken`` (Slurm's first fit)."""
    if a.gpu_ids:
        return a.gpu_ids
    return tuple([i for i in range(size) if i not in taken][: a.gpus])


def build_round(snapshot: Snapshot) -> Round:
    """Groups from ``Job.colocated_with`` (partners that left the snapshot are gone) for
    whole-GPU jobs, pools for the 1-GPU jobs bound by index; idle GPUs by index."""
    running = {j.job_id: j for j in snapshot.jobs if j.is_running and j.placement is not None}
    size = {n.name: n.gpus for n in snapshot.cluster.nodes}
    # GPU indices first: jobs that name them, then (in id order) the others, lowest free first.
    taken: dict[str, set[int]] = {n: set() for n in size}
    named: dict[JobId, Placement] = {}
    for jid in sorted(running, key=lambda j: (not running[j].placement.has_ids, j)):  # type: ignore[union-attr]
        job = running[jid]
        assert job.placement is not None
        if in_pool(job) and is_floater(job):
            continue  # a floater holds no GPU of its own (the rotation gives it one)
        allocs = []
        for a in job.placement.allocations:
            if a.gpus <= 0 and not a.gpu_ids:
                continue
            ids = _ids_of(a, taken.setdefault(a.node, set()), size.get(a.node, 0))
            taken[a.node].update(ids)
            allocs.append(Allocation(a.node, max(a.gpus, len(ids)), ids))
        named[jid] = Placement(tuple(allocs))
    groups: list[Group] = []
    group_of: dict[JobId, Group] = {}
    pools: dict[str, Pool] = {}
    pool_of: dict[JobId, Pool] = {}
    device: dict[JobId, int] = {}
    packed: dict[JobId, bool] = {}
    for jid in sorted(running):
        job = running[jid]
        if in_pool(job):
            continue
        if jid in group_of:
            continue
        members = [job] + [
            running[p] for p in sorted(job.colocated_with) if p in running and p != jid and not in_pool(running[p])
        ]
        g = Group(members=members, placement=named[jid], packed=job.packed and len(members) > 1)
        groups.append(g)
        for m in members:
            group_of[m.job_id] = g
    whole = {n: {i for g in groups for a in g.placement.allocations if a.node == n for i in a.gpu_ids} for n in size}
    shard_held: dict[str, set[int]] = {}
    for jid in sorted(running):
        job = running[jid]
        if not in_pool(job):
            continue
        assert job.placement is not None
        node = job.placement.nodes[0]
        if node not in pools:
            pools[node] = Pool(node, [i for i in range(size.get(node, 0)) if i not in whole[node]], [])
        pools[node].members.append(job)
        pool_of[jid] = pools[node]
        ids = named[jid].ids_on(node) if jid in named else job.placement.ids_on(node)
        device[jid] = ids[0] if ids else (job.bound_gpus[0] if job.bound_gpus else 0)
        packed[jid] = job.packed and not job.suspended
        if is_floater(job):
            shard_held.setdefault(node, set()).update(job.bound_gpus)
    runs = {jid: not j.suspended for jid, j in running.items()}
    # Idle: not held by a group, not bound to a pinned pool job, not run on by a floater.
    idle: dict[str, list[int]] = {}
    for n, gpus in size.items():
        busy = set(whole[n])
        for m in pools[n].members if n in pools else []:
            if not is_floater(m) or runs[m.job_id]:
                busy.add(device[m.job_id])
        free_ids = [i for i in range(gpus) if i not in busy]
        # GPUs the owner reports unavailable (other partitions' jobs, a draining node) go
        # first from the top, as Slurm's first fit leaves the highest free.
        gone = min(snapshot.unavailable.get(n, 0), len(free_ids))
        idle[n] = free_ids[: len(free_ids) - gone] if gone else free_ids
    alloc: dict[str, int] = {}
    first: dict[str, tuple[float, int, int]] = {}
    for g in groups:
        head = g.members[0]
        key = (head.first_start_time if head.first_start_time is not None else 0.0, int(head.job_id), head.num_gpus)
        for a in g.placement.allocations:
            alloc[a.node] = alloc.get(a.node, 0) + a.gpus * g.size
            if a.node not in first or key < first[a.node]:
                first[a.node] = key
    for n, pool in pools.items():
        alloc[n] = alloc.get(n, 0) + pool.size
        for m in pool.members:
            key = (m.first_start_time if m.first_start_time is not None else 0.0, int(m.job_id), 1)
            if n not in first or key < first[n]:
                first[n] = key
    aff = {n.name: (first[n.name][2] if n.name in first else 0) for n in snapshot.cluster.nodes}
    return Round(
        snapshot=snapshot,
        free={n: len(ids) for n, ids in idle.items()},
        groups=groups,
        group_of=group_of,
        runs=runs,
        alloc=alloc,
        aff=aff,
        pools=pools,
        pool_of=pool_of,
        device=device,
        packed=packed,
        idle=idle,
        shard_held=shard_held,
    )
