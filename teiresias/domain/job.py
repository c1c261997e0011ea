"""A job as the policies see it (Tiresias §3.2.3 vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NewType

from teiresias.domain.placement import Placement
from teiresias.domain.service import attained_gpu_seconds, attained_service
from teiresias.domain.usage import JobUsage

JobId = NewType("JobId", int)


class JobState(str, Enum):
    """Only the two states a policy acts on; finished jobs leave the snapshot."""

    PENDING = "PENDING"  # Tiresias' WAITING: never started, or preempted
    RUNNING = "RUNNING"


@dataclass(slots=True)
class Job:
    """One training job.

    The owner (simulator or controller) keeps these fields current before each
    round; a policy reads them and must not write them.

    ``executed_time`` is Tiresias' t_J and ``waiting_time`` its delta_J: both
    are reset to 0 by a starvation promotion (§3.2.3), so they are *since the
    last promotion*. ``total_executed_time`` is never reset and is what the job
    has really run; it decides completion in the simulator.
    """

    job_id: JobId
    num_gpus: int
    submit_time: float
    user: str = ""
    account: str = ""
    model_name: str = ""
    state: JobState = JobState.PENDING
    first_start_time: float | None = None
    # When the job entered its current state: a RUNNING job's latest start
    # (or resume), a PENDING job's latest preemption; None if never started
    # or unknown. The in-queue order ``lifo-resume`` reads it (policy.mlfq).
    state_since: float | None = None
    executed_time: float = 0.0
    waiting_time: float = 0.0
    total_executed_time: float = 0.0
    queue_index: int = 0
    preemptions: int = 0
    skew: float | None = None
    placement: Placement | None = None
    # The run time the job declared (Slurm's TimeLimit), seconds; None: unknown.
    # Information, never a duration: Slurm ends the job there, so its GPU-time
    # is at most num_gpus x time_limit (gittins truncates its distribution there).
    time_limit: float | None = None
    # Oracle knowledge: run time when running alone and consolidated. Only the
    # simulator and the srtf/srsf oracles may read it; None on a live cluster.
    duration: float | None = None
    # The app (Themis §2: a group of related jobs, e.g. one hyper-parameter
    # search) when the owner knows it explicitly: ``tsbatch --app``, a trace's
    # ``app`` column. Empty: the policy derives it (teiresias.policy.themis.apps).
    app: str = ""
    # When a RUNNING job's GPU lease ends (Themis §3.3.2), as the owner stored
    # it from the last Plan's ``leases``; None: no lease (started by another
    # policy, or before a restart), so the GPUs are up for auction.
    lease_end: float | None = None
    # Consolidated seconds left as measured live (tsbatch --iterations and the
    # hooks' step times; slurm_plugin/controller/leases.py); None: unknown.
    # Unlike ``duration`` it is a measurement, not oracle knowledge.
    measured_left: float | None = None
    # Measured GPU/CPU use of the current run (live controller, tsbatch jobs);
    # None: not running, not measured yet, or a simulated job.
    usage: JobUsage | None = None
    # GPU sharing (SJF-BSBF): the job sharing this RUNNING job's GPUs (either
    # side of the pair), and this job's sub-batch and gradient-accumulation
    # steps when it runs with a smaller batch than asked (None / 1: full batch).
    shared_with: JobId | None = None
    sub_batch: int | None = None
    accumulation: int = 1
    # Whether the owner can put another job on this job's GPUs at all (SJF-BSBF's pairs,
    # Gandiva's time-slicing and packing). Live: a shard job (``--gres=shard:N``); a
    # ``--gres=gpu`` job holds its GPUs whole, Slurm gives no shard of them to anyone, so it
    # neither hosts nor joins (docs/sjf-bsbf.md §9). The simulator shares any job.
    shareable: bool = True
    # Gandiva (docs/gandiva.md; the owner keeps them from the plans it enacted).
    # ``suspended``: RUNNING but paused in place, still holding its GPUs
    # (Plan.suspend); ``slice_since``: when it last started, resumed or was
    # suspended (the round-robin reads it); ``slices``: how many times it was
    # suspended to let a partner run; ``migrations``: how many Plan.migrate moved it.
    suspended: bool = False
    slice_since: float | None = None
    slices: int = 0
    migrations: int = 0
    # The RUNNING jobs on the same GPUs (Plan.colocate; a group holds one set of
    # GPUs; 1-GPU jobs: the node's jobs it time-slices with) and whether it runs
    # packed (at once with the other jobs on its GPU) rather than sliced.
    colocated_with: tuple[JobId, ...] = ()
    packed: bool = False
    # Set by the owner when a Plan.unpack undid a packing of this job: its
    # packed throughput lost to time-slicing. ``pack_failed_with``: the jobs it
    # was packed with then; it is not packed with them again, but may be tried
    # on another GPU (Gandiva §4.2.2: "try the next lowest utilization GPU").
    pack_failed: bool = False
    pack_failed_with: tuple[JobId, ...] = ()
    # The GPU indices Slurm binds the job to on each of its nodes (the per-GPU
    # gres types of a shard job, docs/gandiva.md "Which GPU a shard job gets"):
    # () not bound (Slurm picks at each start); one index: it runs only on that
    # GPU of a node, across requeues too; several: it holds a shard of each and
    # the owner runs it on one of them at a time (server-wide time-slicing,
    # Gandiva §4.1 Figure 9). Its placement's ``gpu_ids`` say where it runs now.
    bound_gpus: tuple[int, ...] = ()
    # ``tsbatch --elastic MIN-MAX``: the GPU counts it may be resized to
    # (Plan.resize); num_gpus is its current size. None: fixed size.
    elastic: tuple[int, int] | None = None
    # Introspection (Gandiva §3.2): seconds per mini-batch of the current run
    # while it progresses, and as measured while it ran alone on its GPUs; a
    # packed group is worth keeping while sum(solo / step) > 1 (time-slicing
    # gives 1). None: not measured (simulated jobs get them from the engine).
    step_time: float | None = None
    solo_step_time: float | None = None
    # Where the owner lets the job run (live: Slurm's ``-x``, ``--constraint``, a GPU
    # type; ``-w``): a placement keeps to ``nodes_allowed`` (None: any node) and gives
    # each node of ``nodes_required`` some of the job's GPUs. The simulator leaves both
    # unset (teiresias/policy/placement.py).
    nodes_allowed: frozenset[str] | None = None
    nodes_required: frozenset[str] = frozenset()
    # The job's own shape when its owner asked per node (live: ``--gpus-per-node``,
    # ``--gres=gpu:N`` with ``-N``): a placement gives it num_gpus / gpus_per_node nodes
    # with exactly that many GPUs each, as Slurm will. 0: any split (the simulator's).
    gpus_per_node: int = 0
    # The owner's protection of a RUNNING job: the allocation walk does not preempt
    # it before this instant (a minimum run time from its start; ``inf``: never, e.g.
    # a job that cannot checkpoint or be requeued). None: no protection. Computed
    # by teiresias.policy.protect.protected_until, the one rule both owners use.
    protected_until: float | None = None

    @property
    def attained_service(self) -> float:
        """W_J * t_J in GPU-seconds since the last promotion: the 2D attained service of
        §3.2.2 (``teiresias.domain.service``, the one definition)."""
        return attained_service(self.num_gpus, self.executed_time)

    @property
    def attained_gpu_seconds(self) -> float:
        """All GPU-time ever received (not reset by promotion); for reports
        (``teiresias.domain.service``)."""
        return attained_gpu_seconds(self.num_gpus, self.total_executed_time)

    @property
    def remaining_time(self) -> float | None:
        if self.duration is None:
            return None
        return max(self.duration - self.total_executed_time, 0.0)

    @property
    def is_running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def constrained(self) -> bool:
        """Does the owner restrict the job's nodes (``nodes_allowed`` / ``nodes_required``)?"""
        return self.nodes_allowed is not None or bool(self.nodes_required)
