"""Affinity-based node allocation: Gandiva's Algorithm 1 (getNode, §4.2.1).

A node's affinity is the GPU count of the jobs placed on it (set by the
first job there, 0 while it is empty), so jobs of the same size gather on the
same nodes (Figure 7). For a job of ``g`` GPUs, in order:

1. nodes of affinity ``g`` with free GPUs, least loaded first (lines 5-6);
2. empty nodes (affinity 0) with enough GPUs (lines 7-8);
3. any free GPUs, affinity relaxed (lines 9-10; may spread, migration
   consolidates later);
4. over-subscription (lines 11-12), the least loaded node of affinity ``g``:
   a 1-GPU job joins the node's pool and time-slices across its GPUs
   (pools.py); a bigger job time-slices with a group of ``g``-GPU jobs; up to
   ``max_height`` jobs per GPU;
5. else the job waits (lines 13-14).

"Free" is by GPU index (state.Round.fits): a job bound to one GPU index (a
requeued shard job live) fits only where that GPU is idle, and a job of
several GPUs never gets a GPU a time-sliced 1-GPU job holds a shard of.
"""

from __future__ import annotations

from dataclasses import dataclass

from teiresias.domain import Job, Placement
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.gandiva import pools
from teiresias.policy.gandiva.state import Group, Pool, Round


def affinity(r: Round, node: str) -> int:
    """The GPU count of the oldest group on ``node`` (its first job), 0 when none is there."""
    return r.aff.get(node, 0)


@dataclass(frozen=True)
class Choice:
    """Where Algorithm 1 puts a job: its own GPUs, a group to time-slice with, or a node's pool."""

    placement: Placement
    line: str  # which branch of Algorithm 1, for the audit note
    group: Group | None = None
    pool: Pool | None = None
    gpu: int = 0  # the GPU of ``pool`` it runs on first


def _free_for(job: Job, r: Round) -> dict[str, int]:
    """Free GPUs per node as ``job`` may use them (the placement policies count)."""
    if job.num_gpus == 1 or job.bound_gpus:
        return {n: (1 if r.fits(job, n, 1) else 0) for n in r.free}
    return {n: r.whole_free(n) for n in r.free}


def get_node(job: Job, r: Round, placement: PlacementPolicy, max_height: int) -> Choice | str:
    """Algorithm 1 for ``job``: a Choice, or why it waits."""
    cluster = r.snapshot.cluster
    g = job.num_gpus
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    aff = r.aff
    if g <= cluster.max_gpus_per_node:
        same = [n for n in aff if aff[n] == g and r.fits(job, n, g)]
        if same:
            node = min(same, key=lambda n: (r.load(n), order[n]))
            return Choice(Placement.of({node: g}), f"same affinity {g}, load {r.load(node):.2f}")
        empty = [n for n in aff if aff[n] == 0 and r.fits(job, n, g)]
        if empty:
            node = min(empty, key=lambda n: (r.free[n], order[n]))
            return Choice(Placement.of({node: g}), "unallocated node")
    else:
        # A multi-node job: whole empty nodes first (their affinity becomes g).
        empty_free = {n: (r.whole_free(n) if aff[n] == 0 else 0) for n in r.free}
        pl = placement.place(job, empty_free, cluster)
        if pl is not None:
            return Choice(pl, "unallocated nodes")
    pl = placement.place(job, _free_for(job, r), cluster)
    if pl is not None:
        return Choice(pl, "affinity relaxed")
    if max_height <= 0:
        return "waits: no idle GPU"
    if not job.shareable:
        # Live, a job holding whole GPUs (--gres=gpu) gets no shard of another's GPU (Job.shareable).
        return f"waits for {g} free GPU(s): it asks for whole GPUs, so it time-slices with no job"
    if g == 1:
        got = pools.join_target(r, job, max_height)
        if isinstance(got, tuple):
            pool, gpu, why = got
            return Choice(Placement.on({pool.node: (gpu,)}), why, pool=pool, gpu=gpu)
        if isinstance(got, str):
            return got
        return "waits for 1 free GPU: no node of 1-GPU jobs to time-slice on (Gandiva Algorithm 1 line 14)"
    # Over-subscription: a group of g-GPU jobs on nodes of affinity g, not on a draining node.
    unavailable = r.snapshot.unavailable
    hosts = [
        grp
        for grp in r.groups
        if grp.gpus == g
        and not grp.packed
        and grp.size < max_height
        and not any(m.job_id in r.start for m in grp.members)  # a partner must be running already
        and all(m.num_gpus == g and m.shareable for m in grp.members)
        and all(aff[n] == g and not unavailable.get(n, 0) for n in grp.nodes)
    ]
    if hosts:
        host = min(
            hosts,
            key=lambda grp: (
                grp.size,
                max(r.load(n) for n in grp.nodes),
                min(order[n] for n in grp.nodes),
                grp.members[0].job_id,
            ),
        )
        return Choice(host.placement, f"over-subscribed: height {host.size + 1} with affinity {g}", host)
    if any(grp.gpus == g and grp.size >= max_height for grp in r.groups):
        return f"waits: every group of {g}-GPU jobs already time-slices {max_height} jobs (--max-height)"
    if any(a == g for a in aff.values()):
        return (
            f"waits for {g} free GPU(s): no group of {g}-GPU jobs it may time-slice with now"
            " (packed, just started, on a draining node, or holding whole GPUs)"
        )
    return f"waits for {g} free GPU(s): no node of affinity {g} to time-slice on (Gandiva Algorithm 1 line 14)"
