"""Who holds which GPUs, and which opportunistic jobs a guaranteed cell displaces.

HiveD keeps two cell views: guaranteed (high-priority) jobs see only their
VC's cells, opportunistic (low-priority) jobs see every idle GPU. When a
guaranteed job is given a cell that opportunistic jobs are using, those jobs
are preempted ("two cell views"); among equally good cells the allocator
picks the one whose preemption costs least ("choose the farthest away cell to
minimize preemption"). The victims are a decision in the Plan: the controller
checkpoints and requeues them.

GPU ownership is kept per leaf cell. Below the node level this is accounting
only (Slurm picks GPU indices inside a node), but the counts are exact.
"""

from __future__ import annotations

from collections.abc import Iterable

from teiresias.cells.model import Cell
from teiresias.domain import JobId


class Occupancy:
    """Leaf owners and per-cell counts of used and opportunistic GPUs (ancestors included)."""

    __slots__ = ("owner", "opportunistic", "used", "opp_gpus", "opp_jobs", "_job_cell", "job_leaves")

    def __init__(self) -> None:
        self.owner: dict[int, JobId] = {}
        self.opportunistic: set[JobId] = set()
        self.used: dict[int, int] = {}
        self.opp_gpus: dict[int, int] = {}
        # Distinct opportunistic jobs per cell, kept incrementally so that a cost is O(1).
        self.opp_jobs: dict[int, int] = {}
        self._job_cell: dict[tuple[JobId, int], int] = {}
        self.job_leaves: dict[JobId, list[Cell]] = {}

    def occupy(self, job: JobId, cells: Iterable[Cell], opportunistic: bool) -> None:
        leaves = [leaf for c in cells for leaf in c.leaves()]
        for leaf in leaves:
            if leaf.index in self.owner:
                raise ValueError(f"GPU cell {leaf.address} is already held by job {self.owner[leaf.index]}")
        self.job_leaves.setdefault(job, []).extend(leaves)
        if opportunistic:
            self.opportunistic.add(job)
        for leaf in leaves:
            self.owner[leaf.index] = job
            self._count(job, leaf, +1, opportunistic)

    def vacate(self, job: JobId) -> list[Cell]:
        """Free every GPU of ``job``; returns its leaf cells."""
        leaves = self.job_leaves.pop(job, [])
        opp = job in self.opportunistic
        self.opportunistic.discard(job)
        for leaf in leaves:
            del self.owner[leaf.index]
            self._count(job, leaf, -1, opp)
        return leaves

    def _count(self, job: JobId, leaf: Cell, delta: int, opportunistic: bool) -> None:
        c: Cell | None = leaf
        while c is not None:
            i = c.index
            self.used[i] = self.used.get(i, 0) + delta
            if opportunistic:
                self.opp_gpus[i] = self.opp_gpus.get(i, 0) + delta
                key = (job, i)
                n = self._job_cell.get(key, 0) + delta
                if n:
                    self._job_cell[key] = n
                else:
                    del self._job_cell[key]
                if (delta > 0 and n == 1) or (delta < 0 and n == 0):
                    self.opp_jobs[i] = self.opp_jobs.get(i, 0) + delta
            c = c.parent

    def used_gpus(self, c: Cell) -> int:
        return self.used.get(c.index, 0)

    def opp_jobs_in(self, c: Cell) -> set[JobId]:
        """Opportunistic jobs holding GPUs inside ``c``."""
        if not self.opp_gpus.get(c.index):
            return set()
        return {
            self.owner[leaf.index]
            for leaf in c.leaves()
            if leaf.index in self.owner and self.owner[leaf.index] in self.opportunistic
        }

    def cost(self, c: Cell) -> tuple[int, int]:
        """Preemption cost of giving ``c`` to a guaranteed job: (jobs preempted, their GPUs).

        Counting whole jobs first is what minimises preemptions; the GPU count
        breaks ties towards the cell whose displaced work is smallest. Among
        equal costs the allocator keeps its own (deterministic) order.
        """
        return (self.opp_jobs.get(c.index, 0), self.opp_gpus.get(c.index, 0))


def victims(occ: Occupancy, cells: Iterable[Cell]) -> list[JobId]:
    """The opportunistic jobs to preempt so that ``cells`` are entirely free, sorted by id."""
    out: set[JobId] = set()
    for c in cells:
        out |= occ.opp_jobs_in(c)
    return sorted(out)
