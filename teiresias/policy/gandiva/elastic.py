"""Grow-shrink (Gandiva §3.1 "Grow-Shrink", §4.2.2, Figure 11).

Only for jobs that declare it (``Job.elastic`` = (MIN, MAX) GPUs). A job grows
onto idle GPUs of its own node(s) once they have sat idle ``idle_period``
seconds and nothing waits (the paper grows within one server, after a
time-out, to avoid thrashing); it shrinks at once, down to what the first
waiting job leaves it, when a waiting job needs its GPUs. Either is a
restart at the new size from a checkpoint (``Plan.resize``).
"""

from __future__ import annotations

from teiresias.domain import Job, Placement
from teiresias.policy.gandiva.state import Round


def _elastic(r: Round) -> list[Job]:
    return [
        g.members[0]
        for g in r.groups
        if g.size == 1 and g.members[0].elastic is not None and g.members[0].job_id not in r.touched
    ]


def shrink(r: Round, waiting: list[Job]) -> None:
    """Shrink grown jobs so the first waiting job that fits their GPUs can start next round."""
    grown = sorted(_elastic(r), key=lambda j: (-j.num_gpus, j.job_id))
    if not grown:
        return
    for want in waiting:
        for job in grown:
            assert job.elastic is not None and job.placement is not None
            low = job.elastic[0]
            if job.num_gpus <= low or len(job.placement.allocations) != 1:
                continue
            node = job.placement.allocations[0].node
            if r.snapshot.unavailable.get(node, 0):
                continue
            # A job of several GPUs gets whole ones only (none a floater holds a shard of).
            idle = r.whole_free(node) if want.num_gpus > 1 else r.free.get(node, 0)
            short = want.num_gpus - idle
            if short <= 0 or want.num_gpus > r.snapshot.cluster.node(node).gpus:
                continue
            size = job.num_gpus - short
            if size < low:
                continue
            # It keeps its lowest GPUs (its placement names them once the owner knows them).
            own = job.placement.ids_on(node)
            r.resize[job.job_id] = Placement.on({node: own[:size]}) if len(own) >= size else Placement.of({node: size})
            r.touched.add(job.job_id)
            r.notes[job.job_id] = (
                f"shrink: {job.num_gpus} -> {size} GPUs on {node}: job {want.job_id} waits"
                f" for {want.num_gpus} and the node has {idle} idle"
            )
            return  # one waiting job served per round; the next round sees the freed GPUs


def grow(r: Round, idle_period: float) -> float:
    """Grow elastic jobs onto GPUs idle long enough; returns when a later round could grow one (inf: never)."""
    now = r.snapshot.now
    wake = float("inf")
    for job in sorted(_elastic(r), key=lambda j: j.job_id):
        assert job.elastic is not None and job.placement is not None
        high = job.elastic[1]
        if job.num_gpus >= high or len(job.placement.allocations) != 1:
            continue
        node = job.placement.allocations[0].node
        # Whole GPUs only: it grows to 2 or more, and a GPU a floater holds a shard of is no
        # GPU Slurm gives a gpu job (state.Round.whole_free); counting it planned a "grow" to
        # the size the job already has (the engine refused it).
        extra = min(r.whole_free(node), high - job.num_gpus)
        if extra <= 0 or r.snapshot.unavailable.get(node, 0):
            continue
        since = r.snapshot.idle_since.get(node, now)
        if now - since < idle_period:
            wake = min(wake, since + idle_period)
            continue
        size = job.num_gpus + extra
        got = r.take(Placement.of({node: extra}), job)
        own = job.placement.ids_on(node)
        to = Placement.on({node: own + got.ids_on(node)}) if own else Placement.of({node: size})
        r.resize[job.job_id] = to
        r.touched.add(job.job_id)
        r.notes[job.job_id] = (
            f"grow: {job.num_gpus} -> {size} GPUs on {node}, idle for {now - since:.0f} s (>= {idle_period:g} s)"
        )
    return wake
