"""Virtual clusters and their lazy virtual -> physical binding (HiveD §3).

A VC's quota is a set of *virtual cells* ("preassigned" cells in HiveD), e.g.
two node cells and one socket cell. A virtual cell is bound to a physical cell
of the same type only when a guaranteed job of the VC first needs part of it,
by buddy allocation in the physical space; it is unbound (and its physical
cell merged back) when the last such job leaves. Binding lazily is what keeps
as many high-level physical cells free as possible, and what lets a VC move
off a faulty node: the next binding simply avoids it.

Inside its bound cells a VC allocates with its own buddy space, so a VC's
guaranteed jobs see exactly what a private cluster of its virtual cells would
offer; below the virtual cell level the mapping virtual -> physical is free to
avoid bad cells (HiveD maps it per level; here the physical sub-cells are the
VC's cells directly, which is the same thing with the identity mapping).
"""

from __future__ import annotations

from dataclasses import dataclass

from teiresias.cells.buddy import BuddySpace, Cost
from teiresias.cells.config import VCSpec
from teiresias.cells.model import Cell, CellChain


@dataclass(slots=True)
class VirtualCell:
    """One preassigned virtual cell of a VC; ``bound`` is its physical cell while in use."""

    vc: str
    number: int  # position in the VC's quota list, stable across rounds
    chain: str
    level: int
    bound: Cell | None = None

    @property
    def key(self) -> str:
        return f"{self.vc}/{self.number}"


class VirtualCluster:
    """The runtime of one VC: its virtual cells, their bindings, and its buddy space."""

    def __init__(
        self, spec: VCSpec, chains: dict[str, CellChain], bad_nodes: frozenset[str], node_cells: dict[str, Cell]
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.chains = chains
        self.cells: list[VirtualCell] = []
        for q in spec.quota:  # already sorted by chain, then largest level first
            for _ in range(q.count):
                self.cells.append(VirtualCell(spec.name, len(self.cells), q.chain, q.level))
        self.space = BuddySpace()
        self.space.set_bad_nodes(bad_nodes, node_cells)
        self._by_physical: dict[int, VirtualCell] = {}

    # -- binding ------------------------------------------------------------------

    def bind(self, v: VirtualCell, pc: Cell) -> None:
        v.bound = pc
        self._by_physical[pc.index] = v
        self.space.add_ceiling(pc)

    def unbind(self, v: VirtualCell, physical: BuddySpace) -> None:
        pc = v.bound
        assert pc is not None
        self.space.remove_ceiling(pc)
        del self._by_physical[pc.index]
        v.bound = None
        physical.release(pc)

    def bound_root_of(self, c: Cell) -> VirtualCell | None:
        x: Cell | None = c
        while x is not None:
            v = self._by_physical.get(x.index)
            if v is not None:
                return v
            x = x.parent
        return None

    def bound_cells(self) -> list[VirtualCell]:
        return [v for v in self.cells if v.bound is not None]

    def unbound_cells(self) -> list[VirtualCell]:
        return [v for v in self.cells if v.bound is None]

    # -- guaranteed allocation ----------------------------------------------------

    def can_fit(self, chain: str, level: int) -> bool:
        """Would a private cluster of this VC's virtual cells have a free level-``level`` cell?

        Ignores faults: it is the quota view, not the physical one.
        """
        for (ch, lv), pool in self.space.free.items():
            if ch == chain and lv >= level and pool:
                return True
        return any(v.chain == chain and v.level >= level for v in self.unbound_cells())

    def alloc(self, chain: str, level: int, physical: BuddySpace, cost: Cost | None) -> Cell | None:
        """One guaranteed level-``level`` cell: inside a bound cell, else bind a new one.

        Bound cells are tried first so that unbound virtual cells keep whole
        physical cells free; a new binding takes the smallest unbound virtual
        cell large enough (the buddy rule, at the VC level).
        """
        c = self.space.alloc(chain, level, cost)
        if c is not None:
            return c
        tried: set[int] = set()
        for v in sorted(self.unbound_cells(), key=lambda v: (v.level, v.number)):
            if v.chain != chain or v.level < level or v.level in tried:
                continue
            tried.add(v.level)
            pc = physical.alloc(chain, v.level, cost)
            if pc is None:
                continue  # no healthy physical cell of this size: try a larger virtual cell
            self.bind(v, pc)
            c = self.space.alloc(chain, level, cost)
            if c is not None:
                return c
            self.unbind(v, physical)  # bad cells inside pc: undo and keep looking
        return None

    def release(self, c: Cell, physical: BuddySpace) -> None:
        """Free a guaranteed cell; unbind its virtual cell once it is entirely free."""
        self.space.release(c)
        v = self.bound_root_of(c)
        if v is not None and v.bound is not None and self.space.is_free(v.bound):
            self.unbind(v, physical)

    def adopt(self, c: Cell, physical: BuddySpace) -> bool:
        """Account exactly cell ``c`` as guaranteed (restoring a running job); False if impossible.

        Inside a bound cell it must be free; otherwise an unbound virtual cell
        of a level at or above ``c`` is bound to the ancestor of ``c`` at that
        level, if that ancestor is physically unbound.
        """
        v = self.bound_root_of(c)
        if v is not None:
            return self.space.take(c)
        for v in sorted(self.unbound_cells(), key=lambda v: (v.level, v.number)):
            if v.chain != c.chain.name or v.level < c.level:
                continue
            anc = c.ancestor_at(v.level)
            if anc is None or not physical.take(anc):
                continue
            self.bind(v, anc)
            if self.space.take(c):
                return True
            self.unbind(v, physical)
        return False

    def used_cells(self) -> dict[int, int]:
        """Guaranteed-used GPUs per bound virtual cell number (for reports)."""
        out: dict[int, int] = {}
        for v in self.bound_cells():
            assert v.bound is not None
            free = sum(
                c.gpus for (ch, _), pool in self.space.free.items() for c in pool.values() if v.bound.contains(c)
            )
            out[v.number] = v.bound.gpus - free
        return out
