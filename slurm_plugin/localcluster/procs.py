"""Processes by pid: is it alive, is it ours, stop it.

Two facts of this kind of host drive the details: PID 1 reaps orphans late,
so a zombie must count as dead (``kill -0`` says it lives); and a pid file can
outlive its process and name an unrelated one, so the command name in
``/proc/PID/comm`` is checked before any signal is sent.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/PID/stat, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: the state follows the last ')'
    return stat.rsplit(")", 1)[1].split()[0]


def proc_comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def is_alive(pid: int, comm: str | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, its comm is ``comm``."""
    state = proc_state(pid)
    if state is None or state in ("Z", "X"):
        return False
    return comm is None or proc_comm(pid) == comm


def read_pidfile(path: Path) -> int | None:
    try:
        text = "".join(ch for ch in path.read_text() if ch.isdigit())
    except OSError:
        return None
    return int(text) if text else None


def pid_from_file(path: Path, comm: str) -> int | None:
    """The live pid named by ``path`` if its process is ``comm``; else None."""
    pid = read_pidfile(path)
    if pid is not None and is_alive(pid, comm):
        return pid
    return None


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def stop_pid(pid: int, comm: str, timeout: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; only if the pid is still ``comm``.

    Returns True if the process is gone (or a zombie) at the end.
    """
    if not is_alive(pid, comm):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if wait_until(lambda: not is_alive(pid), timeout):
        return True
    if is_alive(pid, comm):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
    return wait_until(lambda: not is_alive(pid), 5.0)


def pids_with_cwd_under(comm: str, root: Path) -> list[int]:
    """Live processes named ``comm`` whose working directory is inside ``root``
    (how slurmstepd of one cluster is told apart from another's)."""
    out = []
    prefix = str(root).rstrip("/") + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if proc_comm(pid) != comm or not is_alive(pid):
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if (cwd + "/").startswith(prefix):
            out.append(pid)
    return out


def job_pids(conf: Path) -> list[int]:
    """Live processes started by a job of the cluster whose slurm.conf is
    ``conf``: SLURM_JOB_ID and ``SLURM_CONF=conf`` in their environment. How a
    job process that left its process tree (setsid, a daemonised child) is
    still found: proctrack/linuxproc follows only the tree, so such a process
    outlives its job and the cluster."""
    want = f"SLURM_CONF={conf}".encode()
    me = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env):
            out.append(int(entry.name))
    return out


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first seen, then theirs)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _ppid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return [p for p in out if is_alive(p)]


def kill_if_alive(pid: int) -> None:
    if is_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def listen_addresses(port: int) -> list[str]:
    """The addresses TCP ``port`` is listened on, as the kernel has them
    (/proc/net/tcp and tcp6): ``0.0.0.0`` or ``::`` for every address."""
    import ipaddress

    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN
                continue
            addr, _, hexport = fields[1].partition(":")
            if int(hexport, 16) != port or len(addr) != width:
                continue
            # each 32-bit word is in host (little-endian) order
            raw = b"".join(bytes.fromhex(addr[i : i + 8])[::-1] for i in range(0, width, 8))
            found.append(str(ipaddress.ip_address(raw)))
    return sorted(set(found))
