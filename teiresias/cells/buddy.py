"""The buddy cell allocator (HiveD, "Buddy cell allocation algorithm").

A ``BuddySpace`` manages the free cells under a set of *ceiling* cells:

- allocate a level-k cell: take a free level-k cell if there is one;
  otherwise take the smallest free higher cell and split it recursively until
  a level-k cell is produced (its buddies go to the free lists);
- release a level-k cell: put it back, and while all its buddies are free,
  merge them into their parent, going up the levels (never above a ceiling).

Free lists always hold *maximal* free cells, so the free structure is a
function of the set of allocated cells: releasing exactly undoes allocating.
The scheduler relies on this to roll back tentative allocations.

Two spaces are used (see vc.py): the *physical* space, whose ceilings are the
top-level cells and whose allocated cells are those bound to a VC's virtual
cells; and one space per VC, whose ceilings are its bound cells and whose
allocated cells are those used by its guaranteed jobs.

A cell that touches a bad node (DOWN/DRAIN) is never handed out; a free cell
that only *contains* bad nodes is still split for its healthy parts (HiveD
``safeRelaxedBuddyAlloc``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from teiresias.cells.model import Cell

Cost = Callable[[Cell], tuple]
"""Preemption cost of handing out a cell (lower first); see preempt.py."""


class BuddySpace:
    """Free lists of maximal free cells, per (chain, level), under ceiling cells."""

    __slots__ = ("free", "ceilings", "bad_nodes", "_bad_cells")

    def __init__(self, ceilings: Iterable[Cell] = (), bad_nodes: frozenset[str] = frozenset()) -> None:
        # dict used as an ordered set: O(1) removal, deterministic iteration order.
        self.free: dict[tuple[str, int], dict[int, Cell]] = {}
        self.ceilings: dict[int, Cell] = {}
        self.bad_nodes = bad_nodes
        self._bad_cells: set[int] = set()  # cells at or above node level that contain a bad node
        for c in ceilings:
            self.add_ceiling(c)

    # -- health ---------------------------------------------------------------

    def set_bad_nodes(self, bad: frozenset[str], node_cells: dict[str, Cell]) -> None:
        self.bad_nodes = bad
        self._bad_cells = set()
        for n in bad:
            c = node_cells.get(n)
            while c is not None:
                self._bad_cells.add(c.index)
                c = c.parent

    def healthy(self, c: Cell) -> bool:
        if not self.bad_nodes:
            return True
        if c.node is not None:
            return c.node not in self.bad_nodes
        return c.index not in self._bad_cells

    def _usable(self, c: Cell, level: int) -> bool:
        """True when splitting ``c`` can yield a healthy level-``level`` cell."""
        if self.healthy(c):
            return True
        if c.level == level:
            return False
        return any(self._usable(ch, level) for ch in c.children)

    # -- free lists -----------------------------------------------------------

    def _push(self, c: Cell) -> None:
        self.free.setdefault((c.chain.name, c.level), {})[c.index] = c

    def _pop(self, c: Cell) -> None:
        del self.free[(c.chain.name, c.level)][c.index]

    def is_free(self, c: Cell) -> bool:
        """True when ``c`` is a maximal free cell (in a free list)."""
        return c.index in self.free.get((c.chain.name, c.level), ())

    def free_cells(self, chain: str, level: int) -> list[Cell]:
        return list(self.free.get((chain, level), {}).values())

    def add_ceiling(self, c: Cell) -> None:
        """Make ``c`` a ceiling and free (a VC's newly bound cell; a top-level cell)."""
        self.ceilings[c.index] = c
        self._push(c)

    def remove_ceiling(self, c: Cell) -> None:
        """Drop a ceiling that is entirely free again (a VC cell being unbound)."""
        if not self.is_free(c):
            raise ValueError(f"cell {c.address} is not entirely free; cannot drop it")
        self._pop(c)
        del self.ceilings[c.index]

    def free_block_containing(self, c: Cell) -> Cell | None:
        """The maximal free cell that contains ``c`` (or is ``c``), None if ``c`` is (partly) used."""
        x: Cell | None = c
        while x is not None:
            if self.is_free(x):
                return x
            if x.index in self.ceilings:
                return None
            x = x.parent
        return None

    # -- allocate / release ---------------------------------------------------

    def alloc(self, chain: str, level: int, cost: Cost | None = None) -> Cell | None:
        """Buddy-allocate a healthy level-``level`` cell of ``chain``; None when there is none.

        ``cost`` picks, among equally good free cells, the one that preempts
        the least (HiveD: prioritise cells with fewer opportunistic GPUs).
        """
        cell = self._take_free(chain, level, level, cost)
        if cell is not None:
            return cell
        parent = self._split_source(chain, level + 1, level, cost)
        if parent is None:
            return None
        return self._split_down(parent, level, cost)

    def _take_free(self, chain: str, level: int, want: int, cost: Cost | None) -> Cell | None:
        """Take a free level-``level`` cell usable for a level-``want`` request."""
        pool = self.free.get((chain, level))
        if not pool:
            return None
        c: Cell | None
        if cost is None and not self.bad_nodes:
            c = next(iter(pool.values()))  # fast path: any free cell will do
        else:
            c = self._cheapest((c for c in pool.values() if self._usable(c, want)), cost)
            if c is None:
                return None
        self._pop(c)
        return c

    @staticmethod
    def _cheapest(cands: Iterable[Cell], cost: Cost | None) -> Cell | None:
        """The first candidate of least cost; stops at the first free-of-cost one."""
        best: Cell | None = None
        best_cost: tuple | None = None
        for c in cands:
            if cost is None:
                return c
            k = cost(c)
            if best_cost is None or k < best_cost:
                best, best_cost = c, k
                if not any(k):
                    break
        return best

    def _split_source(self, chain: str, level: int, want: int, cost: Cost | None) -> Cell | None:
        """The smallest free cell at ``level`` or above that can be split for a ``want`` cell."""
        top = max((lv for (ch, lv) in self.free if ch == chain), default=0)
        for lv in range(level, top + 1):
            c = self._take_free(chain, lv, want, cost)
            if c is not None:
                return c
        return None

    def _split_down(self, c: Cell, level: int, cost: Cost | None) -> Cell:
        """Split ``c`` (already out of the free lists) down to one healthy level-``level`` cell.

        The buddies not taken go to the free lists; the best child (usable,
        lowest cost) is split further.
        """
        while c.level > level:
            pick = self._cheapest((k for k in c.children if self._usable(k, level)), cost)
            assert pick is not None  # c was chosen because it has a usable child
            for k in c.children:
                if k is not pick:
                    self._push(k)
            c = pick
        return c

    def take(self, c: Cell) -> bool:
        """Allocate exactly ``c`` (restoring state from running jobs); False if not free."""
        block = self.free_block_containing(c)
        if block is None:
            return False
        self._pop(block)
        # Split along the path from block down to c; the off-path buddies stay free.
        path: list[Cell] = []
        x = c
        while x is not block:
            path.append(x)
            x = x.parent  # type: ignore[assignment]
        for node in reversed(path):
            for k in node.parent.children:  # type: ignore[union-attr]
                if k is not node:
                    self._push(k)
        return True

    def release(self, c: Cell) -> None:
        """Free ``c`` and merge free buddies upwards, never above a ceiling."""
        while c.index not in self.ceilings and c.parent is not None:
            buddies = c.parent.children
            if not all(b is c or self.is_free(b) for b in buddies):
                break
            for b in buddies:
                if b is not c:
                    self._pop(b)
            c = c.parent
        self._push(c)

    def snapshot(self) -> dict[tuple[str, int], tuple[str, ...]]:
        """Free cell addresses per (chain, level), sorted: for tests and reports."""
        return {k: tuple(sorted(c.address for c in v.values())) for k, v in self.free.items() if v}
