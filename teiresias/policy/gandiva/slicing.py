"""Suspend-resume time-slicing (Gandiva §3.1, §4.2.2 "Time-slicing").

In a time-sliced group exactly one member runs; when its slice is over it is
suspended (it keeps its GPUs) and the member suspended longest resumes: round
robin, so over a cycle each of k members gets 1/k of the GPUs. A group left
with one member runs it.
"""

from __future__ import annotations

from teiresias.domain import Job
from teiresias.policy.gandiva.state import Group, Round


def _since(j: Job) -> float:
    return j.slice_since if j.slice_since is not None else float("-inf")


def rotate(r: Round, slice_len: float) -> float:
    """Suspend and resume so each sliced group runs one member; returns the next slice end (inf: none)."""
    now = r.snapshot.now
    wake = float("inf")
    for g in r.groups:
        if g.packed:
            for m in g.members:
                r.runs[m.job_id] = True
            continue
        if g.size == 1:
            r.runs[g.members[0].job_id] = True
            continue
        if any(m.job_id in r.touched for m in g.members):
            wake = min(wake, now + slice_len)  # unpacked this round: its first slice starts now
            continue
        running = [m for m in g.members if r.runs[m.job_id]]
        waiting = sorted((m for m in g.members if not r.runs[m.job_id]), key=lambda m: (_since(m), m.job_id))
        # Keep the member whose turn it is (the longest runner of several: an owner's leftover).
        keep = min(running, key=lambda m: (_since(m), m.job_id)) if running else None
        for m in running:
            if m is not keep:
                r.runs[m.job_id] = False
                r.notes[m.job_id] = f"suspend: group of {g.size} time-slices, one member runs at a time"
        if keep is None:
            nxt = waiting[0]
            r.runs[nxt.job_id] = True
            r.notes[nxt.job_id] = f"resume: its group of {g.size} had nobody running"
            wake = min(wake, now + slice_len)
            continue
        end = _since(keep) + slice_len
        if end <= now and waiting:
            nxt = waiting[0]
            r.runs[keep.job_id] = False
            r.runs[nxt.job_id] = True
            r.notes[keep.job_id] = (
                f"suspend: its {slice_len:g} s slice is over ({now - _since(keep):.0f} s run);"
                f" job {nxt.job_id} of its group of {g.size} resumes"
            )
            r.notes[nxt.job_id] = f"resume: its turn in a group of {g.size}, suspended {now - _since(nxt):.0f} s"
            r.touched.update((keep.job_id, nxt.job_id))
            wake = min(wake, now + slice_len)
        elif waiting:
            wake = min(wake, end)
    return wake


def hand_over(r: Round, g: Group, newcomer: Job) -> None:
    """A job starts into sliced group ``g``: it runs first (early feedback, §4.1), the runner is suspended."""
    for m in g.members:
        if r.runs[m.job_id]:
            r.runs[m.job_id] = False
            r.notes[m.job_id] = f"suspend: job {newcomer.job_id} joins its GPUs and runs its first slice"
            r.touched.add(m.job_id)
