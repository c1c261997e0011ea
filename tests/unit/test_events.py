"""The events socket and the poke script (slurm_plugin/controller/events.py).

Real Unix datagram sockets and the real rendered poke script run as a
subprocess (as slurmctld runs it), no test doubles.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit, timelines
from slurm_plugin.controller.events import DEBOUNCE_S, EventSocket, open_events, parse_event, render_poke
from slurm_plugin.localcluster.config import ClusterConfig, render_slurm_conf, rendered_files
from teiresias.errors import ConfigError
from tests.conftest import REPO


def _poke(tmp: Path, sock: Path, job: str = "42", context: str = "epilog_slurmctld") -> subprocess.CompletedProcess:
    script = tmp / f"poke-{sock.name}"  # one rendered script per socket path
    if not script.exists():
        script.write_text(render_poke(str(sock)))
        script.chmod(0o755)
    env = {"SLURM_JOB_ID": job, "SLURM_SCRIPT_CONTEXT": context, "PATH": os.environ.get("PATH", "")}
    return subprocess.run([str(script)], env=env, capture_output=True, timeout=10)


def test_the_shipped_poke_is_the_rendered_one_with_the_default_socket():
    assert (REPO / "etc" / "teiresias-poke").read_text() == render_poke()
    assert os.access(REPO / "etc" / "teiresias-poke", os.X_OK)


def test_a_poke_wakes_the_waiting_socket_with_its_job(tmp_path):
    s = EventSocket(tmp_path / "ev.sock")
    try:
        assert _poke(tmp_path, tmp_path / "ev.sock").returncode == 0
        t0 = time.monotonic()
        events = s.wait(10)
        assert time.monotonic() - t0 < 2
        assert [(e.context, e.job) for e in events] == [("epilog_slurmctld", 42)]
    finally:
        s.close()
    assert not (tmp_path / "ev.sock").exists()


def test_a_burst_of_pokes_is_one_wake_up(tmp_path):
    s = EventSocket(tmp_path / "ev.sock")
    try:
        for j in ("1", "2", "3"):
            _poke(tmp_path, tmp_path / "ev.sock", j)
        assert sorted(e.job for e in s.wait(10)) == [1, 2, 3]
        assert s.wait(0.3) == []  # nothing left over for a second round
    finally:
        s.close()


def test_a_poke_arriving_during_the_debounce_joins_the_burst(tmp_path):
    s = EventSocket(tmp_path / "ev.sock")
    tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:

        def late() -> None:
            tx.sendto(b"epilog_slurmctld 2", str(tmp_path / "ev.sock"))
            time.sleep(DEBOUNCE_S / 4)
            tx.sendto(b"epilog_slurmctld 3", str(tmp_path / "ev.sock"))

        threading.Timer(0.1, late).start()
        assert sorted(e.job for e in s.wait(10)) == [2, 3]
    finally:
        tx.close()
        s.close()


def test_the_poke_exits_0_at_once_with_no_controller_and_with_a_full_socket(tmp_path):
    # No controller: nothing listens at the path.
    t0 = time.monotonic()
    assert _poke(tmp_path, tmp_path / "absent.sock").returncode == 0
    # A controller that does not read: fill its queue until the kernel refuses more.
    s = EventSocket(tmp_path / "ev.sock")
    tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tx.setblocking(False)
    try:
        with pytest.raises(BlockingIOError):
            for _ in range(100_000):
                tx.sendto(b"x" * 400, str(tmp_path / "ev.sock"))
        r = _poke(tmp_path, tmp_path / "ev.sock")
        assert r.returncode == 0 and r.stderr == b""
    finally:
        tx.close()
        s.close()
    assert time.monotonic() - t0 < 5


def test_wait_returns_on_timeout_and_on_stop(tmp_path):
    s = EventSocket(tmp_path / "ev.sock")
    try:
        t0 = time.monotonic()
        assert s.wait(0.3) == []
        assert 0.25 < time.monotonic() - t0 < 2
        stop = threading.Event()
        threading.Timer(0.2, stop.set).start()
        t0 = time.monotonic()
        assert s.wait(30, stop) == []
        assert time.monotonic() - t0 < 2
    finally:
        s.close()


def test_a_dead_controllers_socket_is_replaced_and_a_plain_file_is_refused(tmp_path):
    path = tmp_path / "ev.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(path))
    dead.close()  # the path stays behind, as after kill -9
    s = EventSocket(path)
    assert _poke(tmp_path, path).returncode == 0 and s.wait(5)
    s.close()
    other = tmp_path / "not-a-socket"
    other.write_text("keep me")
    assert open_events(other) is None  # polling only, and the file is left alone
    assert other.read_text() == "keep me"
    assert open_events(None) is None


def test_parse_event_accepts_anything_as_a_wake_up():
    assert parse_event(b"epilog_slurmctld 17", 1.0).job == 17
    e = parse_event(b"\xff garbage", 2.0)
    assert e.job is None and e.received == 2.0
    assert parse_event(b"", 3.0).context == ""


def test_config_events_socket(tmp_path):
    (tmp_path / "run").mkdir()
    cfg = parse_config({"events": {"socket": "run/ev.sock"}}, "t.yaml", tmp_path)
    assert cfg.events_socket == tmp_path / "run" / "ev.sock"
    assert parse_config({}, "t.yaml", tmp_path).events_socket is None
    with pytest.raises(ConfigError, match=r"t.yaml: events.socket: folder .*missing does not exist"):
        parse_config({"events": {"socket": "missing/ev.sock"}}, "t.yaml", tmp_path)
    with pytest.raises(ConfigError, match="events"):
        parse_config({"events": {"sock": "x"}}, "t.yaml", tmp_path)


def test_the_local_cluster_installs_the_poke_for_its_own_socket(tmp_path):
    cfg = ClusterConfig(dir=tmp_path, nodes=2, events=True)
    assert f"EpilogSlurmctld={cfg.poke}" in render_slurm_conf(cfg).splitlines()
    poke = rendered_files(cfg)["teiresias-poke"]
    assert poke == render_poke(str(cfg.events_socket))
    assert f'SOCKET = "{cfg.events_socket}"' in poke


def test_the_poke_is_opt_in(tmp_path):
    """Without events the cluster has no EpilogSlurmctld: on Slurm 22.05 one keeps
    Slurm from starting the next pending job when a job ends (it waits for the
    backfill cycle), which only hurts where no controller releases the jobs."""
    cfg = ClusterConfig(dir=tmp_path, nodes=2)
    assert not any(line.startswith("EpilogSlurmctld") for line in render_slurm_conf(cfg).splitlines())
    assert "teiresias-poke" not in rendered_files(cfg)


def test_timelines_order_stages_and_drop_a_restarted_controllers_repeats(tmp_path):
    audit = AuditLog(tmp_path / "a.jsonl")
    audit.stage(5, "submitted", 10.0, 0)
    audit.stage(5, "decided", 11.0, 0)
    audit.stage(5, "released", 11.2, 0)
    audit.stage(5, "started", 12.0, 0)
    audit.stage(5, "started", 12.0, 0)  # the same run seen again after a restart
    audit.stage(5, "signalled", 20.0, 0)
    audit.stage(5, "acked", 20.5, 0)
    audit.stage(5, "requeued", 21.0, 0)
    audit.stage(6, "finished", 30.0, 0)
    audit.close()
    tl = timelines(read_audit(tmp_path / "a.jsonl"))
    assert [s for s, _, _ in tl[5]] == ["submitted", "decided", "released", "started", "signalled", "acked", "requeued"]
    assert tl[6] == [("finished", 30.0, 0)]
