"""Restoring a valid binding when other VCs' bindings are in the way (HiveD's safety after faults).

Lazy buddy binding keeps HiveD's promise (a VC's guaranteed request within its
quota is served) only as long as every binding was made by the buddy rule on
healthy hardware. A fault breaks that: while a node is bad, a VC whose cell
sat there is bound elsewhere, and once the node is back the bindings can be
spread so that no cell of a larger type is free although the quotas fit (VC
b's pairs on node1 and node4, VC a's node nowhere). Then, and whenever else a
guaranteed request that its VC's own cells could serve fails only because of
where the other bindings lie, this module computes a new binding of every
virtual cell to the physical cells and the guaranteed jobs that must move:

- cells are placed per chain from the top level down (the config's
  feasibility check, done constructively), every bound virtual cell staying
  where it is unless a larger cell had to take its place;
- a virtual cell that needs a place takes the healthy free cell whose
  clearing costs least: fewest running guaranteed jobs migrated, then fewest
  jobs started this round re-placed, then fewest opportunistic jobs preempted;
- unbound virtual cells are placed too, so that after the moves every VC can
  again bind all of its quota (the binding is *valid*); their places are not
  kept, binding stays lazy. Under faults that leave too little healthy
  hardware for everyone, only the requesting VC's cells are placed besides
  the bound ones.

Top-down placement on a buddy hierarchy succeeds whenever the level-by-level
counts allow it, and which healthy cell a level takes does not change what is
left for the levels below; so this finds a valid binding whenever one exists
with the bound cells of bad nodes left in place.

Pure: reads a ``World``, returns the moves; ``World.apply_rebinding`` enacts
them in the round, the controller migrates the moved running jobs through the
checkpoint/requeue path (they are preempted and started at their new cells).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from teiresias.cells.model import Cell
from teiresias.domain import JobId

if TYPE_CHECKING:
    from teiresias.cells.world import World


@dataclass(frozen=True, slots=True)
class Move:
    """Virtual cell ``number`` of VC ``vc`` goes from physical cell ``old`` to ``new``."""

    vc: str
    number: int
    old: Cell
    new: Cell


@dataclass(frozen=True)
class Rebinding:
    moves: tuple[Move, ...]
    jobs: dict[JobId, list[Cell]]  # guaranteed jobs that move -> their cells at the new place


def translate(c: Cell, old_root: Cell, new_root: Cell) -> Cell:
    """The cell at the same position under ``new_root`` as ``c`` under ``old_root`` (same type)."""
    path: list[int] = []
    x = c
    while x is not old_root:
        path.append(x.position)
        x = x.parent  # type: ignore[assignment]  # c lies under old_root: x has a parent until then
    y = new_root
    for p in reversed(path):
        y = y.children[p]
    return y


def plan_rebinding(
    world: World, vc_name: str, job_cost: Callable[[JobId], tuple[int, int]], bad: frozenset[str]
) -> Rebinding | None:
    """A valid binding with the fewest moves found top-down; None when none exists.

    ``job_cost(job)`` is (migrations, re-placements) of moving that guaranteed
    job; ``bad`` the nodes no cell may newly be placed on.
    """
    chains = list(dict.fromkeys(v.chain for v in world.vcs[vc_name].cells))
    for everyone in (True, False):
        moves: list[Move] = []
        ok = True
        for chain in chains:
            got = _place_chain(world, chain, vc_name, everyone, job_cost, bad)
            if got is None:
                ok = False
                break
            moves += got
        if ok:
            return Rebinding(tuple(moves), _moved_jobs(world, moves))
    return None


def _healthy(c: Cell, bad: frozenset[str]) -> bool:
    return not any(n in bad for n in c.nodes)


def _place_chain(
    world: World,
    chain: str,
    vc_name: str,
    everyone: bool,
    job_cost: Callable[[JobId], tuple[int, int]],
    bad: frozenset[str],
) -> list[Move] | None:
    # Bound cells with the guaranteed jobs inside each (what moving it costs).
    bound: list[tuple[str, int, Cell]] = []
    jobs_in: dict[int, set[JobId]] = {}
    for vc in world.vcs.values():
        for v in vc.bound_cells():
            if v.chain == chain and v.bound is not None:
                bound.append((vc.name, v.number, v.bound))
                jobs_in[v.bound.index] = set()
    for job in world.guaranteed:
        job_vc = world.vcs.get(world.job_vc.get(job) or "")
        if job_vc is None:
            continue
        for c in world.job_cells.get(job, ()):
            root = job_vc.bound_root_of(c)
            if root is not None and root.bound is not None and root.bound.index in jobs_in:
                jobs_in[root.bound.index].add(job)
    unbound = [
        (vc.name, v.number, v.level)
        for vc in world.vcs.values()
        if everyone or vc.name == vc_name
        for v in vc.unbound_cells()
        if v.chain == chain
    ]

    placed: set[int] = set()  # physical cells taken by the new binding

    def covered(c: Cell) -> bool:
        x: Cell | None = c
        while x is not None:
            if x.index in placed:
                return True
            x = x.parent
        return False

    def cost(p: Cell) -> tuple[int, ...]:
        mig = rep = 0
        for _, _, pc in bound:
            if pc.level < p.level and p.contains(pc) and pc.index not in placed:
                for j in jobs_in[pc.index]:
                    m, r = job_cost(j)
                    mig += m
                    rep += r
        return (mig, rep, *world.occ.cost(p))

    top = world.config.chains[chain].top.level
    moves: list[Move] = []
    for level in range(int(top), 0, -1):
        here = [b for b in bound if b[2].level == level]
        displaced = [b for b in here if covered(b[2])]
        for _, _, pc in here:
            if not covered(pc):
                placed.add(pc.index)  # stays where it is
        wants: list[tuple[str, int, Cell | None]] = [(n, k, pc) for n, k, pc in displaced]
        # The requesting VC's unbound cells before the others': they are what the request needs.
        wants += [
            (n, k, None) for n, k, lv in sorted(unbound, key=lambda u: (u[0] != vc_name, u[0], u[1])) if lv == level
        ]
        if not wants:
            continue
        cands = [
            c
            for c in world.topology.cells
            if c.chain.name == chain and c.level == level and _healthy(c, bad) and not covered(c)
        ]
        for name, number, old in wants:
            free = [c for c in cands if c.index not in placed]
            if not free:
                return None
            best = min(free, key=lambda c: (cost(c), c.index))
            placed.add(best.index)
            if old is not None:
                moves.append(Move(name, number, old, best))
    return moves


def _moved_jobs(world: World, moves: list[Move]) -> dict[JobId, list[Cell]]:
    by_old = {m.old.index: m for m in moves}
    out: dict[JobId, list[Cell]] = {}
    for job in sorted(world.guaranteed):
        vc = world.vcs.get(world.job_vc.get(job) or "")
        if vc is None:
            continue
        cells = world.job_cells.get(job, [])
        new: list[Cell] = []
        moved = False
        for c in cells:
            root = vc.bound_root_of(c)
            m = by_old.get(root.bound.index) if root is not None and root.bound is not None else None
            if m is None:
                new.append(c)
            else:
                new.append(translate(c, m.old, m.new))
                moved = True
        if moved:
            out[job] = new
    return out
