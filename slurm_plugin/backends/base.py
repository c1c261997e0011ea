"""The one interface the controller uses to read and steer Slurm.

Three implementations: the JSON CLI backend (``squeue --json`` / ``sinfo
--json`` / ``scontrol``; the default and the one tested), slurmrestd, and
pyslurm where it matches the site's Slurm. Parsing of Slurm's output lives in
pure functions beside each backend, tested on captured real output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    state: frozenset[str]  # e.g. {"IDLE"}, {"MIXED"}, {"IDLE", "DRAIN"}, {"DOWN"}
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    cpus: int = 0
    mem_mb: int = 0

    @property
    def usable(self) -> bool:
        """False for nodes that Slurm will not start jobs on."""
        bad = {"DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING",
               "FUTURE", "MAINTENANCE", "RESERVED", "POWERED_DOWN", "INVALID_REG", "UNKNOWN"}
        return not (self.state & bad)


class SlurmBackend(ABC):
    """Read jobs and nodes; act on one job. Every method raises
    ``teiresias.errors.SlurmUnreachable`` when slurmctld does not answer and
    ``JobVanished`` when Slurm no longer knows the job."""

    name: str = "abstract"

    @abstractmethod
    def jobs(self) -> list[SlurmJob]: ...

    @abstractmethod
    def nodes(self) -> list[SlurmNode]: ...

    @abstractmethod
    def hold(self, job_id: int) -> None: ...

    @abstractmethod
    def release(self, job_id: int) -> None: ...

    @abstractmethod
    def set_priority(self, job_id: int, priority: int) -> None: ...

    @abstractmethod
    def set_nodelist(self, job_id: int, nodes: tuple[str, ...]) -> None:
        """Pin a pending job to exactly these nodes (and that node count)."""

    @abstractmethod
    def signal(self, job_id: int, signal: str) -> None:
        """Send a signal to the batch shell and all its children (``--full``)."""

    @abstractmethod
    def requeue(self, job_id: int, hold: bool = True) -> None:
        """Requeue a running job; ``hold`` leaves it held for the controller."""

    @abstractmethod
    def clear_begin_time(self, job_id: int) -> None:
        """Remove the ~120 s BeginTime Slurm sets on a requeued job."""

    @abstractmethod
    def cancel(self, job_id: int) -> None: ...

    def ping(self) -> bool:
        """True when slurmctld answers."""
        try:
            self.nodes()
        except Exception:
            return False
        return True
