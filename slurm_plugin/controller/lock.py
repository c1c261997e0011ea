"""One controller per state DB: an exclusive ``flock`` on ``<state_db>.lock``.

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
import threading
from pathlib import Path

from slurm_plugin.controller.files import FileModes, secure_file
from teiresias.errors import ConfigError


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
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        self.held = True
        return True

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
