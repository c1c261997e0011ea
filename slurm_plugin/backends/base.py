"""The one interface the controller uses to read and steer Slurm.

Three implementations: the JSON CLI backend (``squeue --json`` / ``sinfo
--json`` / ``scontrol``; the default and the one tested), slurmrestd, and
pyslurm where it matches the site's Slurm. Parsing of Slurm's output lives in
pure functions beside each backend, tested on captured real output.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TypeAlias

from teiresias.errors import JobVanished, SlurmError

# How far past the requeue second a requeued job may be made eligible again
# (released, or its BeginTime cleared). slurmd refuses a launch whose job
# credential is not newer, in whole seconds, than the revocation of the job's
# last run (slurm_cred.c: ``cred->ctime <= revoked``), and slurmctld then fails
# the job for good: FAILED, "Killing non-startable batch job: Job credential
# revoked". The requeue revokes at the requeue second, which Slurm also writes
# as the job's new SubmitTime; Slurm's own ~120 s BeginTime after a requeue is
# what normally keeps the two apart, and clearing it removes that guard. The
# margin covers a controller clock slightly behind slurmctld's.
REQUEUE_SETTLE_MARGIN = 0.15

# What a backend's job methods take: a plain job id, or an array task's ``A_T``
# (SlurmJob.target, a string: plain ``A`` would act on every task of the array).
JobTarget: TypeAlias = int | str


def requeue_settle_wait(job: SlurmJob, now: float) -> float:
    """Seconds to wait, from ``now``, before a requeued ``job`` (as read after
    its requeue) may be released or have its BeginTime cleared without Slurm
    killing its next launch; 0 for a job never requeued."""
    if not job.restart_count or not job.submit_time:
        return 0.0
    earliest = math.floor(job.submit_time) + 1 + REQUEUE_SETTLE_MARGIN
    return max(0.0, earliest - now)


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as Slurm reports it, with the fields the controller needs.

    Times are Unix seconds (0 or None when Slurm has none). ``gpus`` is the
    job's total GPU count; ``gpus_per_node`` what it asked per node if it did.
    ``nodes`` are the nodes it runs on (RUNNING) or was pinned to (ReqNodeList).
    """

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, REQUEUED, ...
    state_reason: str
    priority: int
    restart_count: int
    requeue: bool
    held: bool
    gpus: int
    num_nodes: int
    nodes: tuple[str, ...]
    required_nodes: tuple[str, ...]
    submit_time: float
    eligible_time: float | None
    start_time: float | None
    end_time: float | None
    time_limit_minutes: int | None
    command: str
    comment: str
    gpus_per_node: int | None = None
    # GPU shards per node (--gres=shard:N; 0 for a gpu job). Such a job's ``gpus``
    # is one per node: all its shards on a node come from one GPU (Slurm 22.05).
    shards: int = 0
    # Job arrays: a split-off task has its own job_id plus these two; the
    # record of tasks not split off yet carries their set in ``array_tasks``
    # (``0-5``, ``1,3-5%2``) and is the array's meta record.
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_tasks: str = ""
    admin_comment: str = ""
    dependency: str = ""  # ``afterok:12(unfulfilled)``; "" when none is left
    # A heterogeneous job's component: the leader's id (``sbatch A : B``); None otherwise.
    het_job_id: int | None = None
    # What the job asked of its nodes, kept by the controller's placement: the GPU type
    # (``--gres=gpu:a100:2``; "" untyped), the nodes it excluded (``-x``), its
    # ``--constraint`` expression, and an array's limit on running tasks (``%N``; 0: none).
    # ``required_nodes`` is ``-w`` until the controller pins a start (JobRecord.user_nodes).
    gpu_type: str = ""
    excluded_nodes: tuple[str, ...] = ()
    features: str = ""
    array_max_tasks: int = 0
    # GPU indices the job holds on each of its nodes (``gres_detail``'s IDX; running jobs).
    gpu_ids: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # The per-GPU types its shard request names (``shard:g2:1`` -> (2,); backends/gputypes.py):
    # Slurm starts it only on those GPU indices, on whatever node. (): untyped, or no shards.
    shard_gpus: tuple[int, ...] = ()

    def gpu_ids_on(self, node: str) -> tuple[int, ...]:
        return next((ids for n, ids in self.gpu_ids if n == node), ())

    @property
    def target(self) -> str:
        """The id to give scontrol: an array task is ``A_T`` (plain ``A`` would
        act on every task of the array)."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    @property
    def held_by_teiresias(self) -> bool:
        """Held, and the hold is the project's own (job_submit.lua's or the
        controller's: both leave HOLD_MARK in AdminComment) and no person's
        (``person_hold``); any other hold is the user's or an admin's and is
        never released by the controller."""
        return self.held and HOLD_MARK in self.admin_comment.split(";") and self.person_hold is None

    @property
    def person_hold(self) -> str | None:
        """The uid whose hold job_submit.lua wrote into the comment (PERSON_HOLD): a
        hold placed on a job the controller already held, which Slurm itself
        shows nowhere; None when there is none."""
        for item in self.comment.split(";"):
            item = item.strip()
            if item.startswith(PERSON_HOLD) and len(item) > len(PERSON_HOLD):
                return item[len(PERSON_HOLD) :]
        return None


# AdminComment of a job held by job_submit.lua or by the controller (etc/job_submit.lua
# writes the same word): how the controller tells its own hold from a user's or an admin's.
HOLD_MARK = "teiresias:held"


def with_hold_mark(admin_comment: str, on: bool) -> str:
    """``admin_comment`` with HOLD_MARK added (``on``) or taken out, every other item
    kept: an admin's own text, etc/job_submit.lua's shard stash (backends/gputypes.py).
    Slurm's update replaces the whole AdminComment, so a mark written alone would drop them."""
    items = [i for i in (admin_comment or "").split(";") if i and i != HOLD_MARK]
    return ";".join([*items, *([HOLD_MARK] if on else [])])


# The comment item etc/job_submit.lua writes (``teiresias:hold=<uid>``) when a person
# holds a job the controller holds: an owner's ``scontrol hold`` on such a job changes
# nothing Slurm shows (it is held already), and an owner may not write AdminComment.
PERSON_HOLD = "teiresias:hold="


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: frozenset[str]  # e.g. {"IDLE"}, {"MIXED"}, {"IDLE", "DRAIN"}, {"DOWN"}
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    cpus: int = 0
    mem_mb: int = 0
    gpu_types: frozenset[str] = frozenset()  # typed GPUs of its Gres (``gpu:a100:4``)
    features: frozenset[str] = frozenset()  # its active features (``--constraint`` matches them)
    # The GPU indices whose shards have their own gres Type (``shard:g0:K,...``,
    # backends/gputypes.py): a shard job can be put on one of them by name. (): untyped.
    shard_gpus: tuple[int, ...] = ()

    @property
    def usable(self) -> bool:
        """False for nodes that Slurm will not start jobs on."""
        bad = {
            "DOWN",
            "DRAIN",
            "DRAINING",
            "DRAINED",
            "FAIL",
            "FAILING",
            "NOT_RESPONDING",
            "FUTURE",
            "MAINTENANCE",
            "RESERVED",
            "POWERED_DOWN",
            "INVALID_REG",
            "UNKNOWN",
        }
        return not (self.state & bad)


class SlurmBackend(ABC):
    """Read jobs and nodes; act on one job (``job_id`` may be an array task's
    ``A_T``: SlurmJob.target). Every method raises
    ``teiresias.errors.SlurmUnreachable`` when slurmctld does not answer and
    ``JobVanished`` when Slurm no longer knows the job."""

    name: str = "abstract"

    @abstractmethod
    def jobs(self) -> list[SlurmJob]: ...

    @abstractmethod
    def nodes(self) -> list[SlurmNode]: ...

    def jobs_and_nodes(self) -> tuple[list[SlurmJob], list[SlurmNode]]:
        """Both reads of a controller round; a backend that can make them at once
        (the CLI's: two processes) overrides this."""
        return self.jobs(), self.nodes()

    def job(self, job_id: JobTarget) -> SlurmJob:
        """One job as Slurm shows it now (``job_id`` may be an array task's ``A_T``);
        the Enactor reads a requeued job again before restarting it. Backends with
        a cheaper one-job query (the CLI's ``scontrol show job``) override this."""
        for sj in self.jobs():
            if sj.target == str(job_id):
                return sj
        raise JobVanished(f"Slurm no longer knows job {job_id}")

    @abstractmethod
    def hold(self, job_id: JobTarget, admin_comment: str | None = None) -> None:
        """The controller's hold: priority 0 and HOLD_MARK in ONE update, so that
        etc/job_submit.lua tells it from a person's hold (a hold request without the
        mark on a marked job is a person's: PERSON_HOLD). The rest of the AdminComment
        is kept (``with_hold_mark``): ``admin_comment`` is the job's as just read, or
        None to read it first."""

    @abstractmethod
    def release(self, job_id: JobTarget) -> None:
        """Release a held job; a requeued one waits ``requeue_settle_wait``
        first (see REQUEUE_SETTLE_MARGIN)."""

    @abstractmethod
    def set_priority(self, job_id: JobTarget, priority: int) -> None: ...

    @abstractmethod
    def set_nodelist(self, job_id: JobTarget, nodes: tuple[str, ...]) -> None:
        """Pin a pending job to exactly these nodes (and that node count)."""

    @abstractmethod
    def signal(self, job_id: JobTarget, signal: str, scope: str = "full") -> None:
        """Send a signal: ``full`` the batch shell and all its children
        (``--full``), ``batch`` the batch shell only, ``steps`` the job steps only
        (where Slurm sends a ``--signal`` with and without ``B:``)."""

    def batch_script(self, job_id: JobTarget) -> str:
        """The job's batch script as submitted (its ``#SBATCH`` lines included)."""
        raise SlurmError(f"{type(self).__name__} cannot read batch scripts; use the CLI backend")

    def suspend(self, job_id: JobTarget) -> None:
        """``scontrol suspend``: SIGTSTP to every process of the job, SIGSTOP ~2 s
        later; the job keeps its GPUs and shards, its cores are freed (Gandiva
        time-slicing, docs/gandiva.md)."""
        raise SlurmError(f"{type(self).__name__} cannot suspend jobs; use the CLI backend")

    def resume(self, job_id: JobTarget) -> None:
        """``scontrol resume``: SIGCONT to a suspended job."""
        raise SlurmError(f"{type(self).__name__} cannot resume suspended jobs; use the CLI backend")

    def set_gres(self, job_id: JobTarget, gres: str) -> None:
        """Change a pending job's per-node GRES count (``gpu:2``, ``shard:1``): Slurm
        22.05 accepts a new count of the same kind, not gpu <-> shard (Gandiva resize)."""
        raise SlurmError(f"{type(self).__name__} cannot change a job's GRES; use the CLI backend")

    @abstractmethod
    def requeue(self, job_id: JobTarget, hold: bool = True) -> None:
        """Requeue a running job; ``hold`` leaves it held for the controller."""

    @abstractmethod
    def clear_begin_time(self, job_id: JobTarget) -> None:
        """Remove the ~120 s BeginTime Slurm sets on a requeued job. On a job
        that is not held this makes it eligible at once: wait
        ``requeue_settle_wait`` first (see REQUEUE_SETTLE_MARGIN)."""

    @abstractmethod
    def cancel(self, job_id: JobTarget) -> None: ...

    @abstractmethod
    def set_hold_mark(self, job_id: JobTarget, on: bool, admin_comment: str | None = None) -> None:
        """Write (or clear) HOLD_MARK in the job's AdminComment: the sign that
        a hold is the controller's own; the comment's other items stay (as ``hold``).
        On an array's meta record ``A_T`` this also splits task T off into its own job."""

    def ping(self) -> bool:
        """True when slurmctld answers."""
        try:
            self.nodes()
        except Exception:
            return False
        return True
