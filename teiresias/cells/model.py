"""HiveD's typed vocabulary: cell types, levels, and the physical cell tree.

A *cell* is a set of GPUs at one level of affinity (HiveD, "cell structures"):
level 1 is one GPU, and a level-k cell is made of ``child_count`` equivalent
level-(k-1) *buddy* cells. A *chain* is one hierarchy of cell types from the
GPU up to its top type (e.g. GPU -> 2-GPU switch -> 4-GPU socket -> 8-GPU
node -> rack); a cluster may hold several chains (different node models).

Rules that hold everywhere (see docs/cells.md):
- Exactly one level of each chain is the *node level*: a cell of that level
  is one Slurm node. Cells below it are accounted only (which GPU indices a job
  gets inside a node is Slurm's choice); cells above it group nodes.
- The tree is immutable once built: allocation state lives in
  ``teiresias.cells.buddy`` / ``vc`` objects built per scheduling round.
- Cell order is meaningful: ties are broken by ``Cell.index`` so that every
  decision is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NewType

CellLevel = NewType("CellLevel", int)
"""1 = one GPU; level k+1 cells are made of level-k buddies."""

LEAF_LEVEL = CellLevel(1)


@dataclass(frozen=True, slots=True)
class CellType:
    """One type of a chain. ``child`` is None for the GPU (leaf) type."""

    name: str
    level: CellLevel
    child: str | None
    child_count: int
    gpus: int
    is_node: bool


@dataclass(frozen=True)
class CellChain:
    """A hierarchy of cell types from the leaf (index 0) up to ``top``."""

    types: tuple[CellType, ...]

    @property
    def top(self) -> CellType:
        return self.types[-1]

    @property
    def name(self) -> str:
        """A chain is named after its top type (HiveD's ``CellChain``)."""
        return self.top.name

    @property
    def node_level(self) -> CellLevel:
        return next(t.level for t in self.types if t.is_node)

    @property
    def node_gpus(self) -> int:
        return self.types[self.node_level - 1].gpus

    def type_at(self, level: int) -> CellType:
        return self.types[level - 1]

    def level_of(self, type_name: str) -> CellLevel | None:
        for t in self.types:
            if t.name == type_name:
                return t.level
        return None

    def level_for_gpus(self, gpus: int) -> CellLevel:
        """The lowest level whose cells hold at least ``gpus`` GPUs, at most the node level."""
        for t in self.types[: self.node_level]:
            if t.gpus >= gpus:
                return t.level
        return self.node_level


class Cell:
    """One physical cell. Built once by ``Topology``; treat as read-only.

    ``node`` is the Slurm node a cell lies in (node level and below), None
    above the node level. ``nodes`` lists every Slurm node under the cell.
    """

    __slots__ = ("index", "address", "chain", "level", "parent", "children", "node", "nodes", "gpus", "position")

    def __init__(
        self,
        index: int,
        address: str,
        chain: CellChain,
        level: CellLevel,
        parent: Cell | None,
        node: str | None,
        position: int,
    ) -> None:
        self.index = index
        self.address = address
        self.chain = chain
        self.level = level
        self.parent = parent
        self.children: tuple[Cell, ...] = ()
        self.node = node
        self.nodes: tuple[str, ...] = ()
        self.gpus = chain.type_at(level).gpus
        self.position = position  # index among its buddies

    @property
    def type_name(self) -> str:
        return self.chain.type_at(self.level).name

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def leaves(self) -> Iterator[Cell]:
        if not self.children:
            yield self
            return
        for c in self.children:
            yield from c.leaves()

    def descendants_at(self, level: int) -> Iterator[Cell]:
        if self.level == level:
            yield self
        elif self.level > level:
            for c in self.children:
                yield from c.descendants_at(level)

    def ancestor_at(self, level: int) -> Cell | None:
        c: Cell | None = self
        while c is not None and c.level < level:
            c = c.parent
        return c if c is not None and c.level == level else None

    def contains(self, other: Cell) -> bool:
        c: Cell | None = other
        while c is not None and c.level <= self.level:
            if c is self:
                return True
            c = c.parent
        return False

    def __repr__(self) -> str:
        return f"Cell({self.address}, L{self.level})"


@dataclass(frozen=True)
class TopCellSpec:
    """A physical top-level cell as configured: its type and its Slurm nodes in order."""

    type_name: str
    nodes: tuple[str, ...]
    name: str | None = None


@dataclass
class Topology:
    """The whole physical cell forest, with lookups by address and node.

    Addresses: a node-level cell is addressed by its Slurm node name; cells
    below it by ``node/i/j`` (child positions); cells above it by their top
    cell's name (or ``<type>-<k>``) and child positions, e.g. ``rack-0/1``.
    """

    chains: dict[str, CellChain]
    roots: tuple[Cell, ...]
    cells: list[Cell] = field(default_factory=list)
    by_address: dict[str, Cell] = field(default_factory=dict)
    node_cells: dict[str, Cell] = field(default_factory=dict)

    @classmethod
    def build(cls, chains: dict[str, CellChain], tops: list[TopCellSpec]) -> Topology:
        """Build the forest; ``tops`` must already be validated (see config.py)."""
        topo = cls(chains=chains, roots=())
        roots: list[Cell] = []
        counts: dict[str, int] = {}
        for spec in tops:
            chain = chains[spec.type_name]
            k = counts.get(spec.type_name, 0)
            counts[spec.type_name] = k + 1
            name = spec.name or (spec.nodes[0] if chain.top.is_node else f"{spec.type_name}-{k}")
            node_iter = iter(spec.nodes)
            roots.append(topo._grow(chain, chain.top.level, None, name, node_iter, None, 0))
        topo.roots = tuple(roots)
        return topo

    def _grow(
        self,
        chain: CellChain,
        level: CellLevel,
        parent: Cell | None,
        address: str,
        nodes: Iterator[str],
        node: str | None,
        position: int,
    ) -> Cell:
        if level == chain.node_level:
            node = next(nodes)
            address = node
        cell = Cell(len(self.cells), address, chain, level, parent, node, position)
        self.cells.append(cell)
        self.by_address[address] = cell
        if node is not None and level == chain.node_level:
            self.node_cells[node] = cell
        t = chain.type_at(level)
        if t.child is not None:
            cell.children = tuple(
                self._grow(chain, CellLevel(level - 1), cell, f"{address}/{i}", nodes, node, i)
                for i in range(t.child_count)
            )
            cell.nodes = tuple(n for c in cell.children for n in c.nodes) if node is None else (node,)
        else:
            cell.nodes = (node,) if node is not None else ()
        return cell

    @property
    def total_gpus(self) -> int:
        return sum(r.gpus for r in self.roots)
