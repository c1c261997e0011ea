"""One round's cell state: physical space, VCs, GPU owners, and the operations on them.

Built fresh by the policy at the start of every round from the config, the
snapshot and the stored binding (see state.py), then mutated while the round
is decided, then summarised (``to_state``, ``report``). Nothing here survives
a round, which is what keeps the policy pure.

Job -> cells (HiveD's cell request, at node granularity): a job of G GPUs on
a chain with N-GPU nodes asks for G // N node cells and, for the remainder r,
one cell of the lowest level holding r GPUs, of which exactly r GPUs are used
(``carve``); the rest of that cell stays free for other jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from teiresias.cells.buddy import BuddySpace
from teiresias.cells.config import CellsConfig
from teiresias.cells.model import Cell, CellChain, Topology
from teiresias.cells.preempt import Occupancy, victims
from teiresias.cells.rebind import Rebinding
from teiresias.cells.state import Binding, CellsState, JobCells
from teiresias.cells.vc import VirtualCluster
from teiresias.domain import Job, JobId, Placement


def request_levels(chain: CellChain, gpus: int) -> list[tuple[int, int]]:
    """[(cell level, GPUs used in it)] for a job of ``gpus`` GPUs on ``chain``."""
    n = chain.node_gpus
    out = [(int(chain.node_level), n)] * (gpus // n)
    r = gpus % n
    if r:
        out.append((int(chain.level_for_gpus(r)), r))
    return out


def carve(c: Cell, gpus: int, cost: Callable[[Cell], tuple] | None = None) -> tuple[list[Cell], list[Cell]]:
    """Split ``c`` into (cells used, cells left free) so that exactly ``gpus`` GPUs are used.

    Children are filled whole while they fit, the remainder is carved inside
    the next child, recursively: the used GPUs stay as compact as buddies
    allow. ``cost`` orders the children (cheapest first) so that a guaranteed
    job avoids GPUs of opportunistic jobs where it can.
    """
    if gpus >= c.gpus:
        return [c], []
    kids = sorted(c.children, key=cost) if cost is not None else list(c.children)
    used: list[Cell] = []
    free: list[Cell] = []
    left = gpus
    for k in kids:
        if left >= k.gpus:
            used.append(k)
            left -= k.gpus
        elif left > 0:
            u, f = carve(k, left, cost)
            used += u
            free += f
            left = 0
        else:
            free.append(k)
    return used, free


def placement_of(cells: Iterable[Cell]) -> Placement:
    """Node counts of cells at or below the node level (what Slurm is told)."""
    counts: dict[str, int] = {}
    for c in cells:
        assert c.node is not None, f"cell {c.address} is above the node level"
        counts[c.node] = counts.get(c.node, 0) + c.gpus
    return Placement.of(sorted(counts.items()))


@dataclass
class World:
    config: CellsConfig
    topology: Topology
    bad_nodes: frozenset[str]
    unavailable: Mapping[str, int]
    physical: BuddySpace = field(init=False)
    vcs: dict[str, VirtualCluster] = field(init=False)
    occ: Occupancy = field(init=False)
    job_cells: dict[JobId, list[Cell]] = field(init=False)
    job_vc: dict[JobId, str | None] = field(init=False)
    guaranteed: set[JobId] = field(init=False)
    foreign: set[JobId] = field(init=False)  # running on nodes outside the cells config
    vc_used: dict[str, int] = field(init=False)  # guaranteed GPUs per VC
    # Changes so far (any job held or dropped), for the round's memo of failed rebinding checks.
    version: int = field(init=False)
    no_rebind: dict[tuple[str, int], int] = field(init=False)
    _idle_total: int | None = field(init=False)

    def __post_init__(self) -> None:
        self.physical = BuddySpace(self.topology.roots)
        self.physical.set_bad_nodes(self.bad_nodes, self.topology.node_cells)
        chains = dict(self.config.chains)
        self.vcs = {
            s.name: VirtualCluster(s, chains, self.bad_nodes, self.topology.node_cells) for s in self.config.vcs
        }
        self.occ = Occupancy()
        self.job_cells = {}
        self.job_vc = {}
        self.guaranteed = set()
        self.foreign = set()
        self.vc_used = {}
        self.version = 0
        self.no_rebind = {}
        self._idle_total = None

    def vc_of(self, job: Job) -> VirtualCluster | None:
        name = self.config.vc_of_account(job.account)
        return self.vcs.get(name) if name is not None else None

    # -- restoring running jobs ---------------------------------------------------

    def restore(self, job: Job, prior: JobCells | None, bindings: Mapping[tuple[str, int], str]) -> None:
        """Account a running job: exactly as stored when that still matches, else rebuilt."""
        vc = self.vc_of(job)
        self.job_vc[job.job_id] = vc.name if vc else None
        placement = job.placement
        if placement is None or any(n not in self.topology.node_cells for n in placement.nodes):
            self.foreign.add(job.job_id)
            return
        cells = self._stored_cells(placement, prior)
        if (
            cells is not None
            and prior is not None
            and prior.guaranteed
            and vc is not None
            and self._restore_guaranteed(vc, cells, bindings)
        ):
            self._hold(job.job_id, cells, guaranteed=True)
            return
        if cells is None:
            cells = self._cells_for_placement(placement)
        guaranteed = False
        if vc is not None and (prior is None or prior.guaranteed):
            guaranteed = self._adopt_all(vc, cells)
        self._hold(job.job_id, cells, guaranteed)

    def _stored_cells(self, placement: Placement, prior: JobCells | None) -> list[Cell] | None:
        if prior is None:
            return None
        cells = [self.topology.by_address.get(a) for a in prior.cells]
        if any(c is None for c in cells):
            return None
        got = [c for c in cells if c is not None]
        if placement_of(got) != Placement.of(sorted((a.node, a.gpus) for a in placement.allocations)):
            return None  # the job moved (requeued and restarted elsewhere): rebuild
        if any(leaf.index in self.occ.owner for c in got for leaf in c.leaves()):
            return None
        return got

    def _restore_guaranteed(
        self, vc: VirtualCluster, cells: list[Cell], bindings: Mapping[tuple[str, int], str]
    ) -> bool:
        done: list[Cell] = []
        for c in cells:
            if vc.bound_root_of(c) is None:
                for v in vc.unbound_cells():
                    addr = bindings.get((vc.name, v.number))
                    pc = self.topology.by_address.get(addr) if addr else None
                    if pc is not None and pc.level == v.level and pc.contains(c) and self.physical.take(pc):
                        vc.bind(v, pc)
                        break
            if vc.bound_root_of(c) is None or not vc.space.take(c):
                for d in done:
                    vc.release(d, self.physical)
                return False
            done.append(c)
        return True

    def _adopt_all(self, vc: VirtualCluster, cells: list[Cell]) -> bool:
        done: list[Cell] = []
        for c in cells:
            if not vc.adopt(c, self.physical):
                for d in reversed(done):
                    vc.release(d, self.physical)
                return False
            done.append(c)
        return True

    def _cells_for_placement(self, placement: Placement) -> list[Cell]:
        """Cells matching a placement's node counts, compact inside each node (accounting only)."""
        out: list[Cell] = []
        for a in placement.allocations:
            nc = self.topology.node_cells[a.node]
            if a.gpus >= nc.gpus and self.occ.used_gpus(nc) == 0:
                out.append(nc)
            else:
                out += self._idle_leaves_cells(nc, min(a.gpus, nc.gpus))
        return out

    def _idle_leaves_cells(self, nc: Cell, gpus: int) -> list[Cell]:
        """``gpus`` unowned GPUs of node cell ``nc``: a whole idle sub-cell carved when one exists."""
        level = nc.chain.level_for_gpus(gpus)
        for c in nc.descendants_at(level):
            if self.occ.used_gpus(c) == 0:
                return carve(c, gpus)[0]
        free = [leaf for leaf in nc.leaves() if leaf.index not in self.occ.owner]
        return free[:gpus]

    def _hold(self, job: JobId, cells: list[Cell], guaranteed: bool) -> None:
        self.job_cells[job] = cells
        self._idle_total = None
        self.version += 1
        if guaranteed:
            self.guaranteed.add(job)
            vc = self.job_vc.get(job)
            if vc is not None:
                self.vc_used[vc] = self.vc_used.get(vc, 0) + sum(c.gpus for c in cells)
        self.occ.occupy(job, cells, opportunistic=not guaranteed)

    def load_state(self, state: CellsState) -> list[JobId]:
        """Account a stored binding as is (``teiresias cells --state``): no snapshot needed.

        Returns the jobs whose stored cells no longer fit the config (left out).
        """
        bindings = {(b.vc, b.number): b.cell for b in state.bindings}
        skipped: list[JobId] = []
        for jc in sorted(state.jobs, key=lambda jc: not jc.guaranteed):
            cells = [self.topology.by_address.get(a) for a in jc.cells]
            if any(c is None for c in cells) or any(
                leaf.index in self.occ.owner for c in cells if c is not None for leaf in c.leaves()
            ):
                skipped.append(jc.job_id)
                continue
            got = [c for c in cells if c is not None]
            vc = self.vcs.get(jc.vc or "")
            self.job_vc[jc.job_id] = jc.vc if vc is not None else None
            guaranteed = jc.guaranteed and vc is not None and self._restore_guaranteed(vc, got, bindings)
            self._hold(jc.job_id, got, guaranteed)
        return skipped

    # -- guaranteed jobs ----------------------------------------------------------

    def try_guaranteed(self, job: Job) -> tuple[list[Cell], list[JobId]] | None:
        """Cells for ``job`` inside its VC, and the opportunistic jobs they displace; None if no fit.

        Each chain where the VC has quota is tried in config order; a failed
        attempt is rolled back exactly (buddy release undoes allocation).
        """
        vc = self.vc_of(job)
        if vc is None:
            return None
        for chain_name in dict.fromkeys(v.chain for v in vc.cells):
            chain = self.config.chains[chain_name]
            used: list[Cell] = []
            ok = True
            for level, gpus in request_levels(chain, job.num_gpus):
                c = vc.alloc(chain_name, level, self.physical, self.occ.cost)
                if c is None:
                    ok = False
                    break
                u, f = carve(c, gpus, self.occ.cost)
                for x in f:
                    vc.space.release(x)
                used += u
            if ok:
                return used, victims(self.occ, used)
            for c in used:
                vc.release(c, self.physical)
        return None

    def start_guaranteed(self, job: Job, cells: list[Cell], displaced: list[JobId]) -> None:
        for v in displaced:
            self.drop(v)
        self._hold(job.job_id, cells, guaranteed=True)
        self.job_vc[job.job_id] = self.vc_of(job).name  # type: ignore[union-attr]  # the caller found its VC

    def drop(self, job: JobId) -> list[Cell]:
        """Release every cell of a job (preempted or evicted); returns them for a possible restore."""
        cells = self.job_cells.pop(job, [])
        self._idle_total = None
        self.version += 1
        self.occ.vacate(job)
        if job in self.guaranteed:
            self.guaranteed.discard(job)
            name = self.job_vc.get(job)
            if name is not None:
                self.vc_used[name] -= sum(c.gpus for c in cells)
            vc = self.vcs.get(name or "")
            if vc is not None:
                for c in cells:
                    vc.release(c, self.physical)
        return cells

    def readopt(self, job: JobId, cells: list[Cell]) -> bool:
        """Give an evicted guaranteed job back exactly its cells if they are all still free."""
        vc = self.vcs.get(self.job_vc.get(job) or "")
        if vc is None or any(leaf.index in self.occ.owner for c in cells for leaf in c.leaves()):
            return False
        if not self._adopt_all(vc, cells):
            return False
        self._hold(job, cells, guaranteed=True)
        return True

    # -- restoring a valid binding (rebind.py) -------------------------------------

    def could_fit_alone(self, job: Job) -> bool:
        """Could the job's VC serve it if no other VC held anything? (``alone``, cheap test first.)"""
        vc = self.vc_of(job)
        if vc is None:
            return False
        chains = [self.config.chains[c] for c in dict.fromkeys(v.chain for v in vc.cells)]
        # The first cell a request takes is its largest; without a free one even the private view fails.
        if not any(
            vc.can_fit(ch.name, max(lv for lv, _ in request_levels(ch, job.num_gpus)))
            for ch in chains
            if job.num_gpus > 0
        ):
            return False
        return self.alone(vc.name).try_guaranteed(job) is not None

    def alone(self, vc_name: str) -> World:
        """This world with only VC ``vc_name``'s bindings and guaranteed jobs: its private view.

        A request that fits here but not in the real world waits only because
        of where the other VCs' bindings lie.
        """
        w = World(self.config, self.topology, self.bad_nodes, self.unavailable)
        mine, theirs = self.vcs[vc_name], w.vcs[vc_name]
        for v in mine.bound_cells():
            assert v.bound is not None and w.physical.take(v.bound)
            theirs.bind(theirs.cells[v.number], v.bound)
        for job in sorted(self.guaranteed):
            if self.job_vc.get(job) == vc_name:
                cells = self.job_cells[job]
                for c in cells:
                    theirs.space.take(c)
                w.job_vc[job] = vc_name
                w._hold(job, cells, guaranteed=True)
        return w

    def hard_bad_nodes(self) -> frozenset[str]:
        """Bad nodes that Slurm will not use at all (not merely some GPUs busy outside teiresias)."""
        return frozenset(
            n
            for n in self.bad_nodes
            if self.unavailable.get(n, 0) >= self.topology.node_cells[n].gpus or n not in self.unavailable
        )

    def apply_rebinding(self, rb: Rebinding) -> tuple[dict[JobId, list[Cell]], list[JobId]]:
        """Move bound cells and their guaranteed jobs as ``rb`` says.

        Returns the jobs now held at their new cells, and the opportunistic
        jobs those cells displace (already dropped). A job that cannot be held
        at its new cells (it cannot happen when ``rb`` came from this world)
        is left out of the first and stays dropped.
        """
        # A moved job may also hold cells in bound cells that stay: they are rebound in place.
        stay: list[tuple[str, int, Cell]] = []
        moved_roots = {(m.vc, m.number) for m in rb.moves}
        for job in rb.jobs:
            vc = self.vcs[self.job_vc[job] or ""]
            for c in self.job_cells.get(job, []):
                v = vc.bound_root_of(c)
                if v is not None and v.bound is not None and (vc.name, v.number) not in moved_roots:
                    stay.append((vc.name, v.number, v.bound))
        for job in rb.jobs:
            self.drop(job)  # frees the moved cells; a bound cell left empty is unbound
        for name, number, pc in [*((m.vc, m.number, m.new) for m in rb.moves), *stay]:
            vc = self.vcs[name]
            v = vc.cells[number]
            if v.bound is None and self.physical.take(pc):
                vc.bind(v, pc)
        held: dict[JobId, list[Cell]] = {}
        displaced: list[JobId] = []
        for job, cells in rb.jobs.items():
            vc = self.vcs[self.job_vc[job] or ""]
            if not self._adopt_all(vc, cells):
                continue
            for o in victims(self.occ, cells):
                self.drop(o)
                displaced.append(o)
            self._hold(job, cells, guaranteed=True)
            held[job] = cells
        return held, displaced

    # -- opportunistic jobs -------------------------------------------------------

    def idle_gpus(self, nc: Cell) -> int:
        cap = nc.gpus - self.unavailable.get(nc.node or "", 0)
        return max(cap - self.occ.used_gpus(nc), 0)

    def idle_total(self) -> int:
        """Idle GPUs in the whole cluster (cached until a job is held or dropped)."""
        if self._idle_total is None:
            self._idle_total = sum(self.idle_gpus(nc) for nc in self.topology.node_cells.values())
        return self._idle_total

    def _bound_anywhere(self, nc: Cell) -> bool:
        """True when some VC holds a binding on this node (or a cell containing it)."""
        return self.physical.free_block_containing(nc) is None

    def try_opportunistic(self, job: Job) -> list[Cell] | None:
        """Idle GPUs for a low-priority job: whole idle nodes plus one node for the remainder.

        Nodes no VC has bound are preferred, so that guaranteed jobs displace
        as few opportunistic ones as possible later ("farthest away" cell);
        the remainder goes to the partly used node it fits best, keeping
        whole nodes whole.
        """
        if self.idle_total() < job.num_gpus:
            return None  # cheap rejection: most waiting jobs in a busy cluster stop here
        avail = self.idle_gpus
        for chain in self.config.chains.values():
            nodes = [nc for nc in self.topology.node_cells.values() if nc.chain is chain]
            n_whole, r = divmod(job.num_gpus, chain.node_gpus)
            whole = sorted(
                (nc for nc in nodes if avail(nc) == nc.gpus), key=lambda nc: (self._bound_anywhere(nc), nc.index)
            )
            if len(whole) < n_whole:
                continue
            chosen = whole[:n_whole]
            cells: list[Cell] = list(chosen)
            if r:
                taken = {nc.index for nc in chosen}
                rest = [nc for nc in nodes if nc.index not in taken and avail(nc) >= r]
                if not rest:
                    continue
                best = min(rest, key=lambda nc: (self._bound_anywhere(nc), avail(nc) == nc.gpus, avail(nc), nc.index))
                cells += self._idle_leaves_cells(best, r)
            return cells
        return None

    def start_opportunistic(self, job: Job, cells: list[Cell]) -> None:
        vc = self.vc_of(job)
        self.job_vc[job.job_id] = vc.name if vc else None
        self._hold(job.job_id, cells, guaranteed=False)

    # -- summaries ------------------------------------------------------------------

    def to_state(self) -> CellsState:
        bindings = tuple(
            Binding(vc.name, v.number, v.bound.address)
            for vc in self.vcs.values()
            for v in vc.bound_cells()
            if v.bound is not None
        )
        jobs = tuple(
            JobCells(j, self.job_vc.get(j), j in self.guaranteed, tuple(c.address for c in cells))
            for j, cells in sorted(self.job_cells.items())
        )
        return CellsState(bindings, jobs)

    def high_used_per_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n, nc in self.topology.node_cells.items():
            out[n] = self.occ.used.get(nc.index, 0) - self.occ.opp_gpus.get(nc.index, 0)
        return out
