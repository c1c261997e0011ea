"""What a policy is given: the state of the cluster at one instant."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from teiresias.domain.cluster import Cluster
from teiresias.domain.job import Job


@dataclass(frozen=True)
class Snapshot:
    """State in, for one scheduling round.

    ``jobs`` holds every unfinished managed job, PENDING or RUNNING; a RUNNING
    job's ``placement`` says which GPUs it holds. ``unavailable`` counts, per
    node, GPUs that managed jobs may not use this round (GPUs of jobs outside
    the managed partitions, nodes that are DOWN or DRAIN): the owner computes
    it, policies only subtract it.
    """

    now: float
    cluster: Cluster
    jobs: Sequence[Job]
    unavailable: Mapping[str, int] = field(default_factory=dict)

    def free_gpus(self) -> dict[str, int]:
        """GPUs free per node once running managed jobs and ``unavailable`` are counted."""
        free = {n.name: n.gpus - self.unavailable.get(n.name, 0) for n in self.cluster.nodes}
        for j in self.jobs:
            if j.is_running and j.placement is not None:
                for a in j.placement.allocations:
                    free[a.node] = free.get(a.node, 0) - a.gpus
        return free
