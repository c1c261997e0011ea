"""Events from Slurm: a local Unix datagram socket that wakes the controller early.

slurmctld runs ``etc/teiresias-poke`` as ``EpilogSlurmctld`` when a job's run
ends (finished, failed, cancelled or requeued). The poke sends one datagram
here and exits; the controller's loop, otherwise asleep for its poll interval,
runs a round at once, so GPUs freed by an ending job go to the next job within
a second instead of up to ``poll_interval`` later. Polling stays the fallback:
a lost datagram, a poke not installed or a controller restart only cost the
poll latency.

A datagram carries no authority: it only makes the next round come sooner,
and every round reads Slurm itself. So the socket may be writable by Slurm's
user (which is why it is 0666 in a folder the site chooses), and a burst of
job ends (or of stray datagrams) is folded into one round by the debounce.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("teiresias.controller")

# After the first datagram, gather the rest of its burst for this long: a
# preemption that requeues several jobs, or a gang job's end, is one round.
DEBOUNCE_S = 0.2
# How often a wait looks at the stop event (the loop's stop has no file descriptor).
STOP_CHECK_S = 0.25
MAX_DATAGRAM = 512
# AF_UNIX paths are limited to 108 bytes by the kernel (sun_path).
MAX_PATH_BYTES = 107
DEFAULT_SOCKET = "/run/teiresias/events.sock"

# etc/teiresias-poke is this text with DEFAULT_SOCKET (a unit test keeps them equal).
POKE_TEMPLATE = r"""#!/usr/bin/python3 -IS
# teiresias poke: slurmctld runs this as EpilogSlurmctld (docs/admin.md "Events").
# It sends one datagram to the controller's events socket and exits 0 at once,
# whatever happens: a non-blocking send to a Unix datagram socket cannot wait
# on the controller, and a missing or busy controller only means the
# controller's next poll sees the change instead (docs/controller.md "Events").
# -I -S: no site packages, no user environment, so start-up stays ~20 ms.
import os
import socket

# The controller's `events: {socket: ...}`; `teiresias cluster up` writes its own path here.
SOCKET = @SOCKET@

try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setblocking(False)
    msg = "%s %s" % (os.environ.get("SLURM_SCRIPT_CONTEXT", "slurmctld"), os.environ.get("SLURM_JOB_ID", ""))
    s.sendto(msg.encode("ascii", "replace")[:200], SOCKET)
except Exception:
    pass
os._exit(0)
"""


def render_poke(socket_path: str = DEFAULT_SOCKET) -> str:
    """The poke script for a controller listening at ``socket_path`` (a Python literal, so any path is safe)."""
    return POKE_TEMPLATE.replace("@SOCKET@", json.dumps(str(socket_path)))


@dataclass(frozen=True)
class Event:
    """One poke: the hook that sent it (Slurm's SLURM_SCRIPT_CONTEXT, e.g.
    ``epilog_slurmctld``) and the job it named, when the text parses."""

    context: str
    job: int | None
    received: float


def parse_event(data: bytes, received: float) -> Event:
    """``b"<context> <job id>"``; anything else is still an event (it wakes the
    loop), with what could not be read left empty."""
    parts = data[:MAX_DATAGRAM].decode("ascii", "replace").split()
    context = parts[0] if parts else ""
    job = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    return Event(context[:64], job, received)


class EventSocket:
    """The controller's end: bound at ``path`` for the life of ``controller run``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if len(os.fsencode(str(path))) > MAX_PATH_BYTES:
            raise OSError(errno.ENAMETOOLONG, f"events socket path longer than {MAX_PATH_BYTES} bytes", str(path))
        self._remove_stale()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            self._sock.bind(str(path))
            # Slurm's user (SlurmUser) sends; a datagram only wakes a round (module doc).
            os.chmod(path, 0o666)
        except OSError:
            self._sock.close()
            raise
        self.received = 0  # datagrams since start (tests, logs)

    def _remove_stale(self) -> None:
        # Only one controller runs (controller/lock.py), so a socket left at the
        # path is a dead controller's; anything that is not a socket is not ours.
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(
                errno.EEXIST, "exists and is not a socket; remove it or choose another events.socket", str(self.path)
            )
        os.unlink(self.path)

    def fileno(self) -> int:
        return self._sock.fileno()

    def drain(self, now: float | None = None) -> list[Event]:
        """Every datagram queued now, without waiting."""
        out: list[Event] = []
        while True:
            try:
                data = self._sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return out
            self.received += 1
            out.append(parse_event(data, time.time() if now is None else now))

    def wait(self, timeout: float, stop: threading.Event | None = None) -> list[Event]:
        """Sleep until a datagram arrives (then ``DEBOUNCE_S`` more for its burst),
        ``stop`` is set, or ``timeout`` passes. Returns the events (empty: timeout or stop)."""
        deadline = time.monotonic() + timeout
        while stop is None or not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            ready, _, _ = select.select([self._sock], [], [], min(left, STOP_CHECK_S))
            if ready:
                events = self.drain()
                if not events:
                    continue
                burst_end = time.monotonic() + DEBOUNCE_S
                while (left := burst_end - time.monotonic()) > 0 and not (stop is not None and stop.is_set()):
                    if select.select([self._sock], [], [], left)[0]:
                        events.extend(self.drain())
                return events
        return []

    def close(self) -> None:
        self._sock.close()
        try:
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass


def open_events(path: Path | None) -> EventSocket | None:
    """The socket for ``events.socket``, or None (polling only) when not configured
    or when it cannot be bound; the reason is logged once, the loop still runs."""
    if path is None:
        return None
    try:
        sock = EventSocket(path)
    except OSError as exc:
        log.warning("events socket %s not opened (%s); polling every round interval only", path, exc.strerror or exc)
        return None
    log.info("listening for Slurm events on %s (EpilogSlurmctld: etc/teiresias-poke)", path)
    return sock
