"""Faults: which nodes are bad, and how much guarantee the VCs lose (HiveD fault tolerance).

A node that Slurm reports DOWN or DRAIN (the owner puts its GPUs in
``Snapshot.unavailable``, or passes an explicit set) is *bad*: no new cell
touching it is bound or handed out (buddy.py). Because bindings are lazy, a
VC whose cell sat on a bad node is rebound to a healthy cell the next time it
needs it; jobs still running on a DRAINing node keep their cells until they end.
Once the node is back, bindings spread by the fault are repaired when a
guaranteed request needs it (rebind.py).

When the healthy free cells can no longer hold every VC's unbound virtual
cells at once, the shortfall is the VCs' *lost guarantee*: reported per VC
and cell type, never hidden. It is computed like the config's feasibility
check, level by level from the top, over the healthy parts of the free cells.
Shortfall at a level is charged round-robin across VCs (each VC's first
unbound cell of that type is served before any VC's second), so that no VC
silently absorbs all of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from teiresias.cells.buddy import BuddySpace
from teiresias.cells.model import Cell, CellChain
from teiresias.cells.vc import VirtualCell, VirtualCluster


def bad_nodes_of(
    unavailable: Mapping[str, int], node_gpus: Mapping[str, int], explicit: Iterable[str] = ()
) -> frozenset[str]:
    """Nodes whose cells may not be newly bound: any GPU unavailable, or named explicitly.

    A node with only part of its GPUs unavailable (jobs outside the managed
    partitions) cannot give whole-cell affinity either, so it counts as bad
    for guaranteed binding; opportunistic jobs may still use its idle GPUs.
    """
    bad = {n for n, u in unavailable.items() if u > 0 and n in node_gpus}
    bad |= {n for n in explicit if n in node_gpus}
    return frozenset(bad)


def _healthy_counts(space: BuddySpace, c: Cell, counts: dict[int, int]) -> None:
    if space.healthy(c):
        counts[c.level] = counts.get(c.level, 0) + 1
        return
    for k in c.children:
        _healthy_counts(space, k, counts)


def lost_guarantee(
    physical: BuddySpace, vcs: Iterable[VirtualCluster], chains: Mapping[str, CellChain]
) -> list[VirtualCell]:
    """Unbound virtual cells that cannot all be bound to healthy free cells at once."""
    vcs = list(vcs)
    lost: list[VirtualCell] = []
    for cname, chain in chains.items():
        counts: dict[int, int] = {}
        for (ch, _), pool in physical.free.items():
            if ch == cname:
                for c in pool.values():
                    _healthy_counts(physical, c, counts)
        carry = 0
        for level in range(chain.top.level, 0, -1):
            have = counts.get(level, 0) + carry
            demand = [v for vc in vcs for v in vc.unbound_cells() if v.chain == cname and v.level == level]
            # Round-robin across VCs: rank of the cell inside its VC first, then VC name.
            rank: dict[tuple[str, int], int] = {}
            seen: dict[str, int] = {}
            for v in sorted(demand, key=lambda v: (v.vc, v.number)):
                rank[(v.vc, v.number)] = seen.get(v.vc, 0)
                seen[v.vc] = seen.get(v.vc, 0) + 1
            demand.sort(key=lambda v: (rank[(v.vc, v.number)], v.vc))
            served = min(have, len(demand))
            lost += demand[served:]
            if level > 1:
                carry = (have - served) * chain.type_at(level).child_count
    return lost
