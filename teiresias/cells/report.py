"""What ``teiresias cells`` and ``CellPlan.report`` show: per VC quota, binding, use, loss."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from teiresias.cells.faults import lost_guarantee
from teiresias.cells.metrics import fragmentation
from teiresias.domain import JobId

if TYPE_CHECKING:
    from teiresias.cells.world import World


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One cell type of a VC's quota: how many virtual cells, bound now, GPUs used, lost to faults.

    ``lost``: virtual cells the VC cannot use whole: unbound ones no healthy
    free cell is left for, and bound ones with free GPUs on a bad node (a
    partial fault: a job still runs there, the rest of the cell is unusable).
    ``lost_gpus``: the GPUs of the first kind plus the free bad GPUs of the second.
    """

    chain: str
    type_name: str
    level: int
    cell_gpus: int
    quota: int
    bound: int
    used_gpus: int
    lost: int
    lost_gpus: int


@dataclass(frozen=True, slots=True)
class VCRow:
    name: str
    accounts: tuple[str, ...]
    quota: tuple[QuotaRow, ...]
    quota_gpus: int
    guaranteed_gpus: int
    opportunistic_gpus: int
    lost_gpus: int
    guaranteed_jobs: tuple[JobId, ...]
    opportunistic_jobs: tuple[JobId, ...]


@dataclass(frozen=True)
class CellsReport:
    vcs: tuple[VCRow, ...]
    total_gpus: int
    nodes: int
    bad_nodes: tuple[str, ...]
    fragmentation: float
    free_cells: dict[str, int]  # "chain/type" -> unbound maximal free physical cells
    other_jobs: tuple[JobId, ...]  # opportunistic jobs of accounts in no VC

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_report(world: World) -> CellsReport:
    """The report of one round's cell state (also ``teiresias cells``); see faults.py for LOST."""
    lost = lost_guarantee(world.physical, world.vcs.values(), world.config.chains)
    lost_keys = {(v.vc, v.number) for v in lost}
    rows: list[VCRow] = []
    node_cells = world.topology.node_cells
    for vc in world.vcs.values():
        used_by_number = vc.used_cells()
        # Partial faults: free GPUs of bound cells that lie on bad nodes.
        bad_free: dict[int, int] = {}
        if world.bad_nodes:
            for pool in vc.space.free.values():
                for c in pool.values():
                    bad_gpus = (
                        (c.gpus if c.node in world.bad_nodes else 0)
                        if c.node is not None
                        else sum(node_cells[n].gpus for n in c.nodes if n in world.bad_nodes)
                    )
                    v = vc.bound_root_of(c)
                    if bad_gpus and v is not None:
                        bad_free[v.number] = bad_free.get(v.number, 0) + bad_gpus
        qrows: list[QuotaRow] = []
        for q in vc.spec.quota:
            cells = [v for v in vc.cells if v.chain == q.chain and v.level == q.level]
            gpus = world.config.chains[q.chain].type_at(q.level).gpus
            whole = sum(1 for v in cells if (v.vc, v.number) in lost_keys)
            partly = [bad_free[v.number] for v in cells if v.number in bad_free]
            qrows.append(
                QuotaRow(
                    q.chain,
                    q.type_name,
                    q.level,
                    gpus,
                    q.count,
                    sum(1 for v in cells if v.bound is not None),
                    sum(used_by_number.get(v.number, 0) for v in cells),
                    whole + len(partly),
                    whole * gpus + sum(partly),
                )
            )
        jobs = [j for j, name in world.job_vc.items() if name == vc.name and j in world.job_cells]
        g = tuple(sorted(j for j in jobs if j in world.guaranteed))
        o = tuple(sorted(j for j in jobs if j not in world.guaranteed))
        rows.append(
            VCRow(
                vc.name,
                vc.spec.accounts,
                tuple(qrows),
                world.config.quota_gpus(vc.spec),
                sum(sum(c.gpus for c in world.job_cells[j]) for j in g),
                sum(sum(c.gpus for c in world.job_cells[j]) for j in o),
                sum(r.lost_gpus for r in qrows),
                g,
                o,
            )
        )
    capacity = {n: nc.gpus for n, nc in world.topology.node_cells.items()}
    frag = fragmentation(capacity, world.high_used_per_node(), exclude=world.bad_nodes)
    free: dict[str, int] = {}
    for (chain, level), pool in world.physical.free.items():
        if pool:
            key = f"{chain}/{world.config.chains[chain].type_at(level).name}"
            free[key] = free.get(key, 0) + len(pool)
    other = tuple(sorted(j for j, name in world.job_vc.items() if name is None and j in world.job_cells))
    return CellsReport(
        tuple(rows),
        world.topology.total_gpus,
        len(world.topology.node_cells),
        tuple(sorted(world.bad_nodes)),
        frag,
        free,
        other,
    )
