"""Size- and duration-based baselines (Tiresias §3.2.1 Table 1, §5 SRTF).

All are preemptive every round, like the reference simulator's ``sjf``,
``shortest`` and ``shortest-gpu``: the ranking is recomputed and a running job
that ranks too low to keep its GPUs is preempted.

- ``sjf``: smallest GPU count first (Table 1's Smallest-First), ties FIFO.
- ``srtf``: shortest remaining time first (oracle: knows ``Job.duration``).
- ``srsf``: shortest remaining service (remaining time x GPUs) first (oracle).
The oracles tie-break by job id (Fig. 7: "job index is used to break ties").
"""

from __future__ import annotations

from typing import Any

from teiresias.domain import Job, Plan, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.allocate import to_plan, walk
from teiresias.policy.base import PlacementPolicy


class _RankedPolicy:
    name = "?"
    # Ranks each job by a key of its own, then ``walk`` (idle GPUs first): the
    # simulator may prune running jobs from a round (teiresias.policy.allocate).
    idle_first = True
    preemptive = True

    def __init__(self, placement: PlacementPolicy) -> None:
        self.placement = placement

    def key(self, job: Job) -> tuple[Any, ...]:
        raise NotImplementedError

    def decide(self, snapshot: Snapshot) -> Plan:
        ranked = sorted(snapshot.jobs, key=self.key)
        w = walk(snapshot, ranked, self.placement, preemptive=True, policy_name=self.name)
        return to_plan(ranked, w)


class SjfPolicy(_RankedPolicy):
    """Smallest (fewest GPUs) job first, preemptive (Tiresias Table 1, SF)."""

    name = "sjf"

    def key(self, job: Job) -> tuple[Any, ...]:
        return (job.num_gpus, job.submit_time, job.job_id)


def _remaining(job: Job, policy: str) -> float:
    r = job.remaining_time
    if r is None:
        raise ConfigError(
            f"policy {policy!r} is an oracle and needs every job's duration, but job {job.job_id}"
            " has none; use it in the simulator, or choose las or gittins"
        )
    return r


class SrtfPolicy(_RankedPolicy):
    """Shortest remaining time first, oracle (Tiresias §5 SRTF)."""

    name = "srtf"

    def key(self, job: Job) -> tuple[Any, ...]:
        return (_remaining(job, self.name), job.job_id)


class SrsfPolicy(_RankedPolicy):
    """Shortest remaining service (time x GPUs) first, oracle (Tiresias §3.2.1)."""

    name = "srsf"

    def key(self, job: Job) -> tuple[Any, ...]:
        return (_remaining(job, self.name) * job.num_gpus, job.job_id)
