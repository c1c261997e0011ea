"""One controller per state DB: an exclusive ``flock`` on ``<state_db>.lock``;
and one per Slurm cluster: the same on a file beside slurmctld's state
(``ClusterLock``).

Two controllers on one state DB both start and requeue the same jobs (a job
was requeued by one and released by the other 70 ms later, and FAILED). The
kernel drops a ``flock`` when its holder dies, even by ``kill -9``, so a
standby controller waiting for the lock takes over at once and never needs
to guess whether the active one is still alive. The file holds the holder's
pid, for the message that names it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from pathlib import Path

from slurm_plugin.controller.files import FileModes, secure_file
from teiresias.errors import ConfigError


def _flock_naming(fd: int, holder: str) -> bool:
    """Take the exclusive flock on ``fd`` without waiting; once ours, the file names ``holder``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{holder}\n".encode(), 0)
    return True


def lock_path(state_db: Path) -> Path:
    return state_db.with_name(state_db.name + ".lock")


class LockHeld(ConfigError):
    """Another controller holds the state DB (exit 2: the command cannot run as asked)."""


class ControllerLock:
    def __init__(self, state_db: Path, modes: FileModes = FileModes()) -> None:
        self.path = lock_path(state_db)
        secure_file(self.path, modes, "state_db")
        self._fd: int | None = os.open(self.path, os.O_RDWR)
        self.held = False

    def try_acquire(self) -> bool:
        assert self._fd is not None
        self.held = _flock_naming(self._fd, f"{os.getpid()}")
        return self.held

    def holder(self) -> str:
        """The holder's pid as written in the file ('?' when unreadable)."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def acquire(self) -> None:
        """Take the lock now or raise LockHeld naming the holder."""
        if not self.try_acquire():
            raise LockHeld(
                f"another controller (pid {self.holder()}) is running on this state DB"
                f" ({self.path}); stop it, or start this one with --standby"
            )

    def wait(self, stop: threading.Event, interval: float) -> bool:
        """Standby: try every ``interval`` seconds until the lock is ours (True) or ``stop`` is set."""
        while not stop.is_set():
            if self.try_acquire():
                return True
            stop.wait(interval)
        return False

    def release(self) -> None:
        if self._fd is not None:
            # The pid goes first: a reader must never see ours once it is not held.
            if self.held:
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None
            self.held = False


# In slurmctld's StateSaveLocation: one real cluster, one folder, one lock (two test
# clusters on one machine, both named "teiresias", each have their own folder; a lock
# named by ClusterName in a machine-wide place would make them block each other).
CLUSTER_LOCK_NAME = "teiresias-controller.lock"


class ClusterLock:
    """One controller per Slurm cluster, whatever its state DB: two controllers on one
    cluster with different state DBs both acted and preempted each other's jobs. An
    exclusive ``flock`` on ``<StateSaveLocation>/teiresias-controller.lock``, taken at
    the first round that reaches Slurm (``scontrol show config`` says where), held
    for the process's life, dropped by the kernel when it dies (``--standby`` waits
    for it as for the state DB's). The file names the holder: pid, host, state DB."""

    def __init__(self, state_save_location: str, cluster: str, state_db: Path) -> None:
        self.dir = Path(state_save_location)
        self.path = self.dir / CLUSTER_LOCK_NAME
        self.cluster = cluster
        self.state_db = state_db
        self._fd: int | None = None

    def usable(self) -> str | None:
        """Why the lock cannot be taken from here (None: it can): slurmctld's state
        folder is not on this host, or not writable by this user."""
        if not self.dir.is_dir():
            return f"slurmctld's StateSaveLocation {self.dir} is not on this host"
        if not os.access(self.dir, os.W_OK):
            return f"slurmctld's StateSaveLocation {self.dir} is not writable by this user"
        return None

    def try_acquire(self) -> bool:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return _flock_naming(self._fd, f"{os.getpid()} {socket.gethostname()} {self.state_db}")

    def holder(self) -> str:
        try:
            pid, host, db = (self.path.read_text().split(maxsplit=2) + ["?", "?", "?"])[:3]
        except OSError:
            return "?"
        return f"pid {pid} on {host}, state DB {db.strip()}"

    def acquire(self, stop: threading.Event | None = None, interval: float = 0.5) -> None:
        """Take it now, or with ``stop`` (standby) wait until it is free or stop is set;
        LockHeld naming the holder otherwise."""
        while not self.try_acquire():
            if stop is None:
                raise LockHeld(
                    f"another controller ({self.holder()}) manages Slurm cluster {self.cluster!r}"
                    f" ({self.path}); stop it, or start this one with --standby"
                )
            if stop.wait(interval):
                raise LockHeld(f"stopped while waiting for the lock of Slurm cluster {self.cluster!r}")

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None
