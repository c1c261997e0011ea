"""The typed vocabulary shared by policies, simulator and controller.

Rules that hold everywhere (see docs/policy-contract.md):
- A policy never mutates a Job or a Snapshot; it returns a Plan.
- Times are seconds (float). ``now`` is given by the caller: policies have no clock.
- GPU counts are per node; which GPU indices inside a node is Slurm's choice.
"""

from teiresias.domain.cluster import Cluster, Node
from teiresias.domain.job import Job, JobId, JobState
from teiresias.domain.placement import Allocation, Placement
from teiresias.domain.plan import Colocation, Plan
from teiresias.domain.snapshot import Snapshot
from teiresias.domain.usage import JobUsage

__all__ = [
    "Allocation",
    "Cluster",
    "Colocation",
    "Job",
    "JobId",
    "JobState",
    "JobUsage",
    "Node",
    "Placement",
    "Plan",
    "Snapshot",
]
