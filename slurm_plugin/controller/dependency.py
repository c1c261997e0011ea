"""Is a held job's dependency met, read from the jobs Slurm shows?

slurmctld tests the dependencies of a held job only in its periodic passes
(measured on 22.05.8: a job held with ``afterok:A`` still showed
``afterok:A(unfulfilled)`` 52 s after A completed), not when the job it waits
for ends; a released job's are tested at once (``scontrol release`` of such a
job starts it within a second). The controller holds every job it manages, so
waiting for Slurm to say so left GPUs idle for up to a minute. The clauses are
therefore judged here from the same poll: the jobs named, their states and
start times (finished jobs stay in ``squeue`` for MinJobAge). Only what can be
told for certain counts as met; anything else (``aftercorr``, ``singleton``, a
job Slurm no longer shows, an unknown form) is left for Slurm to say, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.backends.parse import FINISHED_STATES, base_state

# One clause as squeue prints it: afterok:12(unfulfilled), after:12+5(unfulfilled), afterany:7_*(...), afterok:7_3(...)
_CLAUSE = re.compile(r"^(after|afterany|afterok|afternotok):(\d+)(?:_(\*|\d+))?(?:\+(\d+))?\((\w+)\)$")


class Jobs:
    """The jobs of one poll by id, array tasks by their array (what a clause names)."""

    def __init__(self, jobs: Iterable[SlurmJob]) -> None:
        self.by_id: dict[int, SlurmJob] = {}
        self.tasks: dict[int, list[SlurmJob]] = {}
        for sj in jobs:
            self.by_id[sj.job_id] = sj
            if sj.array_job_id:
                self.tasks.setdefault(sj.array_job_id, []).append(sj)

    def named(self, job: int, task: str | None) -> list[SlurmJob] | None:
        """The jobs a clause names (every task for ``A_*`` or an array's own id), or None
        when one of them cannot be judged (not shown, or tasks not split off yet)."""
        tasks = self.tasks.get(job, [])
        if task is None and not tasks:
            sj = self.by_id.get(job)
            return None if sj is None else [sj]
        if task is not None and task != "*":
            found = [t for t in tasks if t.array_task_id == int(task)]
            return found or None
        if not tasks or any(t.array_task_id is None for t in tasks):
            return None  # tasks still pending in the meta record
        return tasks


def _met(kind: str, jobs: list[SlurmJob], delay_min: int, now: float) -> bool:
    states = [base_state(j.state) for j in jobs]
    if kind == "after":
        # Begun (or ended: a cancelled job counts), plus the delay after its start.
        return all(
            (j.start_time is not None and j.start_time + 60 * delay_min <= now)
            or (s in FINISHED_STATES and j.start_time is None)
            for j, s in zip(jobs, states, strict=True)
        )
    if delay_min or not all(s in FINISHED_STATES for s in states):
        return False
    if kind == "afterany":
        return True
    if kind == "afterok":
        return all(s == "COMPLETED" for s in states)
    return all(s != "COMPLETED" for s in states)  # afternotok


def dependency_met(dependency: str, jobs: Jobs, now: float) -> bool:
    """Whether every clause of ``dependency`` (``,``: all; ``?``: any) that Slurm still
    calls unfulfilled is met by the jobs it names, as ``jobs`` shows them at ``now``."""
    if not dependency:
        return True
    any_of = "?" in dependency
    results = []
    for clause in dependency.split("?" if any_of else ","):
        m = _CLAUSE.match(clause.strip())
        if m is None:
            results.append(False)  # singleton, aftercorr, burst buffers: Slurm's to say
            continue
        kind, job, task, delay, state = m.groups()
        if state != "unfulfilled":
            results.append(state == "fulfilled")
            continue
        named = jobs.named(int(job), task)
        results.append(named is not None and _met(kind, named, int(delay or 0), now))
    return any(results) if any_of else all(results)
