"""Migration and defragmentation (Gandiva §3.1 "Migration", §4.2.1-§4.2.2).

A migration checkpoints a RUNNING job and starts it again on other GPUs; its
target GPUs must be idle now (the GPUs it leaves are free from the next
round). Three uses, in this order each round:

1. lower the height: when GPUs are idle, a time-sliced job (the one
   suspended longest) moves there and stops sharing (§4.2.1: "migrating a
   job that is suspended to the newly vacated GPU"); a 1-GPU job bound to
   one GPU index moves only to that index of another node, and GPUs freed on
   its own node go to its pool's rotation (pools.py) without a restart;
2. consolidate: a job spread over more nodes than it needs moves onto fewer
   nodes when idle GPUs allow (§4.2.2, Figure 8);
3. defragment, while jobs wait or time-slice: on the non-idle node with the
   most free GPUs (at least ``threshold``), move its single-node jobs to
   other nodes with fewer free GPUs (no job gets slower: one node before and
   after), so whole nodes free up for bigger jobs.
"""

from __future__ import annotations

from teiresias.domain import Job, Placement
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.gandiva.affinity import get_node
from teiresias.policy.gandiva.state import Group, Pool, Round, in_pool


def _move(r: Round, job: Job, to: Placement, note: str) -> None:
    """Record a migration and update the round's groups, pools and idle GPUs."""
    to = r.take(to, job)
    r.migrate[job.job_id] = to
    r.touched.add(job.job_id)
    r.notes[job.job_id] = note
    pool = r.pool_of.pop(job.job_id, None)
    if pool is not None:
        pool.members = [m for m in pool.members if m.job_id != job.job_id]
        r.alloc[pool.node] = r.alloc.get(pool.node, 0) - 1
        node = to.nodes[0]
        r.add_to_pool(job, node, to.ids_on(node)[0], job.bound_gpus)
        return
    g = r.group_of[job.job_id]
    g.members.remove(job)
    if g.size == 1:
        g.packed = False
        r.runs[g.members[0].job_id] = True
    r.add_group(Group(members=[job], placement=to, packed=False))
    r.runs[job.job_id] = True


def lower_height(r: Round, placement: PlacementPolicy) -> None:
    """Move time-sliced jobs onto idle GPUs, longest-suspended first."""
    movers = [
        m
        for g in r.groups
        if g.size > 1 and not g.packed
        for m in g.members
        if not r.runs[m.job_id] and m.job_id not in r.touched
    ]
    movers += [m for p in r.pools.values() for m in p.members if not r.runs[m.job_id] and m.job_id not in r.touched]
    movers.sort(key=lambda m: (m.slice_since if m.slice_since is not None else float("-inf"), m.job_id))
    for m in movers:
        pool = r.pool_of.get(m.job_id)
        if pool is not None:
            where = f"a node of {pool.size} time-sliced jobs ({pool.node})"
        else:
            g = r.group_of[m.job_id]
            if g.size < 2:
                continue
            where = f"a time-sliced group of {g.size}"
        got = get_node(m, r, placement, max_height=0)
        if isinstance(got, str) or (pool is not None and got.placement.nodes == (pool.node,)):
            continue
        _move(r, m, got.placement, f"migrate: leaves {where} for idle GPUs ({got.line}); the height drops")


def consolidate(r: Round, placement: PlacementPolicy, max_gpus_per_node: int) -> None:
    """Move spread jobs onto fewer nodes where idle GPUs allow (Figure 8)."""
    for g in list(r.groups):
        if g.size != 1:
            continue
        job = g.members[0]
        need_nodes = -(-job.num_gpus // max(max_gpus_per_node, 1))
        if job.job_id in r.touched or g.placement.num_nodes <= need_nodes:
            continue
        free = {n: r.whole_free(n) for n in r.free}
        to = placement.place(job, free, r.snapshot.cluster)
        if to is not None and to.num_nodes < g.placement.num_nodes:
            _move(
                r,
                job,
                to,
                f"migrate: consolidates from {g.placement.num_nodes} nodes"
                f" ({', '.join(g.placement.nodes)}) to {to.num_nodes} ({', '.join(to.nodes)})",
            )


def _calm(p: Pool, r: Round) -> bool:
    """A pool whose jobs all run, none packed: its jobs are as alone as a group of one."""
    return all(r.runs[m.job_id] and not r.packed.get(m.job_id) for m in p.members)


def defragment(r: Round, threshold: int) -> None:
    """§4.2.2 background defragmentation, one pass per round."""
    order = {n.name: i for i, n in enumerate(r.snapshot.cluster.nodes)}
    unavailable = r.snapshot.unavailable
    while True:
        busy = {n for g in r.groups for n in g.nodes} | {n for n, p in r.pools.items() if p.members}
        sources = sorted((n for n in busy if r.free.get(n, 0) >= threshold), key=lambda n: (-r.free[n], order[n]))
        moved = False
        for src in sources:
            jobs = [
                g.members[0]
                for g in r.groups
                if g.size == 1 and g.nodes == (src,) and g.members[0].job_id not in r.touched
            ]
            p = r.pools.get(src)
            if p is not None and _calm(p, r):
                jobs += [m for m in p.members if m.job_id not in r.touched and in_pool(m)]
            for job in sorted((j for j in jobs if j.num_gpus > 0), key=lambda j: (j.num_gpus, j.job_id)):
                dests = [
                    n
                    for n in busy
                    if n != src
                    and not unavailable.get(n, 0)
                    and r.fits(job, n, job.num_gpus)
                    and r.free.get(n, 0) < r.free[src]
                ]
                if not dests:
                    continue
                dst = min(dests, key=lambda n: (r.free[n], order[n]))
                _move(
                    r,
                    job,
                    Placement.of({dst: job.num_gpus}),
                    f"migrate: defragmentation, node {src} had {r.free[src]} free GPUs (threshold {threshold}),"
                    f" {dst} has {r.free[dst]}",
                )
                moved = True
                break
            if moved:
                break
        if not moved:
            return
