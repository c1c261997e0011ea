"""One round's working view of the cluster: colocation groups and the GPUs left.

Every mechanism module reads and updates a ``Round``; the policy turns it into
a Plan at the end. Pure: built from a Snapshot, never writes a Job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teiresias.domain import Colocation, Job, JobId, Placement, Snapshot


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
    # GPUs allocated per node counting every member of a group (suspended ones too), and each
    # node's affinity (§4.1: the GPU count of the first job placed there; 0 while empty).
    alloc: dict[str, int] = field(default_factory=dict)
    aff: dict[str, int] = field(default_factory=dict)

    def take(self, placement: Placement) -> None:
        for a in placement.allocations:
            self.free[a.node] -= a.gpus

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

    def load(self, node: str) -> float:
        """Allocated GPUs over the node's GPUs, suspended jobs included (§4.1 height before the ceiling)."""
        n = self.snapshot.cluster.node(node)
        if n.gpus <= 0:
            return float("inf")
        return self.alloc.get(node, 0) / n.gpus

    def height(self, node: str) -> int:
        """§4.1: ceil(allocated / GPUs) of a node; > 1 means it is time-sliced."""
        return -int(-self.load(node) // 1)


def build_round(snapshot: Snapshot) -> Round:
    """Groups from ``Job.colocated_with`` (partners that left the snapshot are gone)."""
    running = {j.job_id: j for j in snapshot.jobs if j.is_running and j.placement is not None}
    groups: list[Group] = []
    group_of: dict[JobId, Group] = {}
    for jid in sorted(running):
        if jid in group_of:
            continue
        job = running[jid]
        members = [job] + [running[p] for p in sorted(job.colocated_with) if p in running and p != jid]
        assert job.placement is not None
        g = Group(members=members, placement=job.placement, packed=job.packed and len(members) > 1)
        groups.append(g)
        for m in members:
            group_of[m.job_id] = g
    free = {n.name: n.gpus - snapshot.unavailable.get(n.name, 0) for n in snapshot.cluster.nodes}
    for g in groups:
        for a in g.placement.allocations:
            free[a.node] = free.get(a.node, 0) - a.gpus
    free = {n: max(f, 0) for n, f in free.items()}
    runs = {jid: not j.suspended for jid, j in running.items()}
    alloc: dict[str, int] = {}
    first: dict[str, tuple[float, int, int]] = {}
    for g in groups:
        head = g.members[0]
        key = (head.first_start_time if head.first_start_time is not None else 0.0, int(head.job_id), head.num_gpus)
        for a in g.placement.allocations:
            alloc[a.node] = alloc.get(a.node, 0) + a.gpus * g.size
            if a.node not in first or key < first[a.node]:
                first[a.node] = key
    aff = {n.name: (first[n.name][2] if n.name in first else 0) for n in snapshot.cluster.nodes}
    return Round(snapshot=snapshot, free=free, groups=groups, group_of=group_of, runs=runs, alloc=alloc, aff=aff)
