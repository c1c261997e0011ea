"""Packing with introspection for groups of multi-GPU jobs (Gandiva §3.1 "Packing", §4.2.2).

(1-GPU jobs are packed per GPU of their node's pool: pools.py.) A time-sliced
group is packed (all members run at once) when it looks light: the members'
measured utilisation (NVML through the hooks, else the hooks' step timing:
``JobUsage.utilisation``), taken while each ran alone, adds up to at most
``pack_util`` percent and their memory fits the GPU. Without a measured
utilisation nothing is packed: a blind trial was undone almost every time
(54 packs, 52 unpacks on one trace). A packed group is measured again: its
throughput, sum over members of solo / packed mini-batch time, must beat
time-slicing's 1 (one member at full speed at a time), else it is unpacked
and those jobs are not packed together again (``Job.pack_failed_with``, kept
by the owner). Both decisions carry these numbers in ``Plan.notes``.
"""

from __future__ import annotations

from teiresias.domain import Job
from teiresias.policy.gandiva.state import Group, Round


def packed_throughput(g: Group) -> float | None:
    """Sum of solo / current mini-batch time over the members; None while some is unmeasured."""
    total = 0.0
    for m in g.members:
        if not m.step_time or not m.solo_step_time:
            return None
        total += m.solo_step_time / m.step_time
    return total


def _util(m: Job) -> float | None:
    return m.usage.utilisation if m.usage is not None else None


def _fits_memory(g: Group) -> bool | None:
    used = [m.usage.gpu_mem_used for m in g.members if m.usage is not None]
    totals = [m.usage.gpu_mem_total for m in g.members if m.usage is not None]
    if len(used) < g.size or any(u is None for u in used) or not totals or any(t is None for t in totals):
        return None
    return sum(u for u in used if u is not None) <= min(t for t in totals if t is not None)


def introspect(r: Round, pack_util: float, settle: float) -> float:
    """Unpack groups whose measured throughput loses to slicing; pack light sliced groups, lightest first.

    ``settle``: seconds a group must have run packed before its throughput is judged
    (a slice: the mini-batch times must be from the packed run). Returns when a packed
    group can next be judged (inf: none waits for it).
    """
    now = r.snapshot.now
    wake = float("inf")
    candidates: list[tuple[float, int, Group, str]] = []
    for g in r.groups:
        if g.size < 2 or any(m.job_id in r.touched for m in g.members):
            continue
        if g.packed:
            since = max((m.slice_since or 0.0) for m in g.members)
            tput = packed_throughput(g)
            if now - since < settle:
                wake = min(wake, since + settle)
                continue
            if tput is None or tput >= 1.0:
                continue
            rates = ", ".join(
                f"job {m.job_id} {m.solo_step_time:.3g}/{m.step_time:.3g} s"
                for m in g.members
                if m.step_time and m.solo_step_time
            )
            g.packed = False
            for i, m in enumerate(g.members):
                r.unpack.append(m.job_id)
                r.touched.add(m.job_id)
                r.runs[m.job_id] = i == 0  # back to slicing: the first member takes the first slice
                r.notes[m.job_id] = (
                    f"unpack: packed throughput {tput:.2f} < 1.00 of time-slicing (solo/packed mini-batch: {rates});"
                    " not packed with these jobs again"
                )
            continue
        # Jobs arrive in exclusive mode and are profiled first (§4.2.2): each member must have run a slice.
        if any(m.first_start_time is None or now - m.first_start_time < settle for m in g.members):
            continue
        ids = {m.job_id for m in g.members}
        if any(set(m.pack_failed_with) & (ids - {m.job_id}) for m in g.members):
            continue  # packed together before, and it lost to time-slicing
        utils = [_util(m) for m in g.members]
        mem = _fits_memory(g)
        if all(u is not None for u in utils):
            total = sum(u for u in utils if u is not None)
            if total > pack_util or mem is False:
                continue
            why = (
                f"pack: utilisation {' + '.join(f'{u:.0f}' for u in utils if u is not None)}"
                f" = {total:.0f}% <= {pack_util:g}%" + ("" if mem is None else ", memory fits")
            )
            candidates.append((total, int(g.members[0].job_id), g, why))
    # Greedy, lightest first (§4.2.2): the order only matters for the audit, each group is independent.
    for _, _, g, why in sorted(candidates, key=lambda c: (c[0], c[1])):
        g.packed = True
        for m in g.members:
            r.pack.append(m.job_id)
            r.touched.add(m.job_id)
            r.runs[m.job_id] = True
            r.notes[m.job_id] = why
    return wake
