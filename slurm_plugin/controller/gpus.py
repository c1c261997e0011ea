"""Which GPU of a node a shard job starts on (docs/gandiva.md "Which GPU a shard job gets").

On nodes with one gres Type per GPU the controller names the GPU: a shard job
held by etc/job_submit.lua asks no gres, and is released with
``--gres=shard:g<i>:N`` for the GPU the plan chose (backends/gputypes.py says
what Slurm 22.05 allows). This module keeps the ledger of GPUs in use per node
and turns a start into GPU indices and the gres to set; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurm_plugin.backends import gputypes
from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.controller.reconcile import RUNNING_STATES, base_state
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Allocation, Placement


def typed_nodes(nodes: Iterable[SlurmNode]) -> frozenset[str]:
    """Nodes whose shards have one Type per GPU (``shard:g0:K,...``)."""
    return frozenset(n.name for n in nodes if n.shard_gpus)


def busy_gpus(
    records: Mapping[int, JobRecord], slurm: Mapping[int, SlurmJob], *, floaters: bool = False
) -> dict[str, set[int]]:
    """GPU indices per node that jobs hold now: running and suspended jobs by Slurm's IDX
    (any partition), jobs the controller is starting by their planned indices. A job
    holding a shard of several GPUs of its node (a Gandiva floater) is counted only
    with ``floaters`` (it runs on one of them at a time; the policy places around it)."""
    busy: dict[str, set[int]] = {}
    for sj in slurm.values():
        if base_state(sj.state) not in RUNNING_STATES:
            continue
        if not floaters and len(sj.shard_gpus) > 1:
            continue
        for node, ids in sj.gpu_ids:
            busy.setdefault(node, set()).update(ids)
    for job_id, r in records.items():
        pending = slurm.get(job_id)
        if (
            r.phase is not Phase.STARTING
            or r.planned is None
            or pending is None
            or base_state(pending.state) != "PENDING"
        ):
            continue
        if not floaters and len(pending.shard_gpus) > 1:
            continue
        for a in r.planned.allocations:
            busy.setdefault(a.node, set()).update(a.gpu_ids)
    return busy


def lowest_idle(placement: Placement, gpus_on: Mapping[str, int], busy: Mapping[str, set[int]]) -> Placement | None:
    """``placement`` on the lowest GPU indices idle on each of its nodes, the same indices on
    every node (a typed request names the same types on all of them); None if there are none."""
    nodes = placement.nodes
    if not nodes:
        return None
    per = {a.gpus for a in placement.allocations}
    if len(per) != 1:
        return None
    want = per.pop()
    size = min(gpus_on.get(n, 0) for n in nodes)
    idle = [i for i in range(size) if all(i not in busy.get(n, set()) for n in nodes)]
    if len(idle) < want:
        return None
    ids = tuple(idle[:want])
    return Placement(tuple(Allocation(n, want, ids) for n in nodes))


def on_ids(placement: Placement, ids: tuple[int, ...]) -> Placement:
    """``placement`` naming ``ids`` on every node."""
    return Placement(tuple(Allocation(a.node, a.gpus, ids) for a in placement.allocations))


def common_ids(placement: Placement) -> tuple[int, ...] | None:
    """The indices ``placement`` names, when they are the same on every node (else None)."""
    sets = {a.gpu_ids for a in placement.allocations}
    if len(sets) != 1:
        return None
    ids = sets.pop()
    return ids or None


def shard_request(sj: SlurmJob, placement: Placement, typed: bool, bind: tuple[int, ...] = ()) -> str | None:
    """The gres to set before releasing ``sj`` on ``placement``: None when there is nothing to
    set (not a shard job held with its request kept aside, or already typed). On typed
    nodes the placement's GPU indices, or ``bind``: every GPU a job joining an
    over-subscribed node may run on (Colocation.gpus, a shard of each); else the
    untyped request as it was."""
    shards = gputypes.stashed_shards(sj.admin_comment)
    if not shards or sj.shard_gpus:
        return None
    if not typed:
        return f"shard:{shards}"
    ids = tuple(bind) if bind else common_ids(placement)
    if ids is None:
        raise ValueError(f"job {sj.job_id}: a typed shard start needs the same GPU indices on every node")
    return gputypes.shard_gres(ids, shards)
