"""What a policy is given: the state of the cluster at one instant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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

    Jobs colocated on the same GPUs (``Job.colocated_with``) each list those
    GPUs in their placement; ``free_gpus`` counts them once per group.
    """

    now: float
    cluster: Cluster
    jobs: Sequence[Job]
    unavailable: Mapping[str, int] = field(default_factory=dict)
    # Per node, since when its set of busy GPUs last changed (a start, end,
    # migration or resize on it): Gandiva grows an elastic job onto GPUs only
    # after they sat idle for a while (§4.2.2 grow-shrink). Missing node: unknown,
    # treated as changed just now.
    idle_since: Mapping[str, float] = field(default_factory=dict)

    def free_gpus(self) -> dict[str, int]:
        """GPUs free per node once running managed jobs and ``unavailable`` are counted."""
        free = {n.name: n.gpus - self.unavailable.get(n.name, 0) for n in self.cluster.nodes}
        grouped = {j.job_id for j in self.jobs if j.colocated_with and j.is_running}
        # A node's time-sliced 1-GPU jobs (bound to GPUs by index, each placed on 0 GPUs with
        # the index it runs on: docs/gandiva.md) hold the GPUs those bound to one GPU are bound
        # to, and those the others run on, as the simulator's pool counts them.
        pooled: dict[str, set[int]] = {}
        for j in self.jobs:
            if j.is_running and j.placement is not None and j.bound_gpus and j.placement.num_gpus == 0:
                for a in j.placement.allocations:
                    if len(j.bound_gpus) == 1 or not j.suspended:
                        pooled.setdefault(a.node, set()).update(a.gpu_ids)
        for node, ids in pooled.items():
            free[node] = free.get(node, 0) - len(ids)
        for j in self.jobs:
            if j.is_running and j.placement is not None:
                # A colocated group's GPUs are counted with its lowest-id member in the snapshot.
                if j.colocated_with and any(p < j.job_id and p in grouped for p in j.colocated_with):
                    continue
                for a in j.placement.allocations:
                    free[a.node] = free.get(a.node, 0) - a.gpus
        return free
