"""The socket layer on real sockets: gloo-shaped traffic counted per slot on
both sides, noise (rendezvous store on MASTER_PORT, UDP/DNS, netlink) not
counted, the per-fd cache reset where sockets are born, nothing left behind
by processes that never communicate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from profiler.env import profile_dir
from profiler.records import FLAG_HEADER, FileState, Kind, read_record_file, record_files
from tests.profiler.conftest import FIXTURES, free_port, profiled_env, run


def test_noise_filtered_and_data_counted(tmp_path: Path) -> None:
    env = profiled_env(tmp_path, MASTER_PORT=str(free_port()), HEADER_FILE=str(tmp_path / "hdr.bin"))
    proc = run([sys.executable, str(FIXTURES / "socket_driver.py")], env)
    fds = json.loads(proc.stdout.strip().splitlines()[-1])
    [f] = record_files(profile_dir(tmp_path))
    rf = read_record_file(f)
    assert rf.state is FileState.EXITED
    r = rf.records
    seen_fds = set(r["fd"].tolist())
    # Only the gloo data connection and the reused-fd socket carried counted traffic.
    assert seen_fds.isdisjoint(fds["store_fds"]), "rendezvous store traffic was counted"
    assert seen_fds.isdisjoint(fds["noise_fds"]), "UDP/netlink traffic was counted"
    assert seen_fds == set(fds["data_fds"]) | {fds["reused_fd"], fds["reused_peer_fd"]}
    sends = rf.of_kind(Kind.SOCK_SEND)
    recvs = rf.of_kind(Kind.SOCK_RECV)
    by_slot = {}
    for rec in sends:
        by_slot[int(rec["slot"])] = by_slot.get(int(rec["slot"]), 0) + int(rec["bytes"])
    assert by_slot == {
        (0x04 << 56) | (10 << 24): 1000,
        (0x04 << 56) | (11 << 24): 20000,
        (0x04 << 56) | (12 << 24): 4000,
        (0x04 << 56) | (99 << 24): 7000,
    }
    # Receives: one header record per message, payload bytes attributed to its slot.
    assert int((recvs["flags"] & FLAG_HEADER).astype(bool).sum()) == 4
    assert int(recvs["bytes"].sum()) == 1000 + 20000 + 4000 + 7000


def test_stale_fd_cache_is_reset_when_a_socket_reuses_the_number(tmp_path: Path) -> None:
    env = profiled_env(tmp_path, MASTER_PORT=str(free_port()), HEADER_FILE=str(tmp_path / "hdr.bin"))
    proc = run([sys.executable, str(FIXTURES / "socket_driver.py")], env)
    fds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert fds["reused_fd"] == fds["stale_fd"], "the test did not manage to reuse the fd number"
    rf = read_record_file(record_files(profile_dir(tmp_path))[0])
    sent = rf.of_kind(Kind.SOCK_SEND)
    assert int(sent[sent["fd"] == fds["reused_fd"]]["bytes"].sum()) == 7000


def test_processes_that_never_communicate_leave_no_file(tmp_path: Path) -> None:
    env = profiled_env(tmp_path)
    run(
        [
            sys.executable,
            "-c",
            "import socket; socket.getaddrinfo('localhost', 80); print(open('/etc/hostname').read())",
        ],
        env,
    )
    run(["sh", "-c", "ls / >/dev/null; cat /etc/hosts >/dev/null"], env)
    assert not profile_dir(tmp_path).exists() or record_files(profile_dir(tmp_path)) == []


def test_inert_without_profile_dir(lib: Path, tmp_path: Path) -> None:
    # LD_PRELOAD alone (no TEIRESIAS_PROFILE_DIR) must change nothing.
    out = subprocess.run(
        [sys.executable, "-c", "print('ok')"],
        env={"LD_PRELOAD": str(lib), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok"
    assert list(tmp_path.iterdir()) == []
