"""`teiresias demo` end to end on its own local cluster (a short run: --scale 0.2).

The demo's cluster gets its ports from TEIRESIAS_TEST_DEMO_PORT_BASE (default:
TEIRESIAS_TEST_CLUSTER_PORT_BASE + 200, i.e. 17300), five ports from there. The
directory and ports reach the demo through TEIRESIAS_CLUSTER_DIR and
TEIRESIAS_CLUSTER_PORT_BASE, the variables `teiresias cluster` reads, so the
test also shows the demo honours them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurm_plugin.localcluster import procs
from tests.conftest import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_demo_runs_the_workload_and_reports_jcts_next_to_the_simulator(tmp_path):
    # Beside the test cluster's ports (default 17100 -> 17300), so parallel sessions that move one move both.
    port = int(
        os.environ.get(
            "TEIRESIAS_TEST_DEMO_PORT_BASE", int(os.environ.get("TEIRESIAS_TEST_CLUSTER_PORT_BASE", "17100")) + 200
        )
    )
    d = tmp_path / "demo"
    env = {**os.environ, "TEIRESIAS_CLUSTER_DIR": str(d), "TEIRESIAS_CLUSTER_PORT_BASE": str(port)}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "teiresias",
            "demo",
            "--scale",
            "0.2",
            "--workload",
            "sleep",
            "--no-live",
            "--json",
            "--timeout",
            "300",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=420,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads(p.stdout)
    assert rep["all_completed"], rep
    assert len(rep["jobs"]) == 12 and {j["gpus"] for j in rep["jobs"]} == {1, 2, 4, 8}
    assert {j["kind"] for j in rep["jobs"]} == {"short", "long"}
    for j in rep["jobs"]:
        # A job cannot finish before it has had its service.
        assert j["jct_s"] >= j["work_s"] - 1.0
        assert j["sim_fifo_jct_s"] >= j["work_s"] - 1e-6 and j["sim_las_jct_s"] >= j["work_s"] - 1e-6
    assert 0 <= rep["run_overhead_s"] < 10  # sleep jobs start fast
    # Its preempted jobs stayed themselves (issue 20 B1: 1, 0 and 8 `replaced` lines in three runs).
    audit = [json.loads(line) for line in (d / "controller" / "audit.jsonl").read_text().splitlines()]
    assert not [e for e in audit if e["action"] == "replaced"]
    assert rep["avg_jct_s"] > 0 and rep["sim_fifo_avg_jct_s"] > 0 and rep["sim_las_avg_jct_s"] > 0
    assert f"SLURM_CONF={d}/etc/slurm.conf" in p.stderr  # the cluster of TEIRESIAS_CLUSTER_DIR
    assert f"SlurmctldPort={port}\n" in (d / "etc" / "slurm.conf").read_text()  # ...on TEIRESIAS_CLUSTER_PORT_BASE
    # It stopped what it started: no slurmctld of that directory is left.
    assert procs.pid_from_file(d / "run" / "slurmctld.pid", "slurmctld") is None
    assert not procs.pids_with_cwd_under("slurmstepd", d)


def _demo_port() -> int:
    return int(
        os.environ.get(
            "TEIRESIAS_TEST_DEMO_PORT_BASE", int(os.environ.get("TEIRESIAS_TEST_CLUSTER_PORT_BASE", "17100")) + 200
        )
    )


def test_a_demo_ended_by_sigterm_cleans_up_like_ctrl_c(tmp_path):
    """Issue 21 item 8: SIGTERM (a CI's timeout, systemd, kill) left the demo's cluster,
    its jobs and its ports behind; SIGINT cleaned up. Now both do."""
    import signal
    import time

    from tests.helpers import poll

    port, d = _demo_port(), tmp_path / "demo"
    out = tmp_path / "demo.out"
    env = {**os.environ, "TEIRESIAS_CLUSTER_DIR": str(d), "TEIRESIAS_CLUSTER_PORT_BASE": str(port)}
    with open(out, "w") as f:
        p = subprocess.Popen(
            [sys.executable, "-m", "teiresias", "demo", "--scale", "0.2", "--workload", "sleep", "--no-live"],
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=env,
        )
    try:
        poll("the demo's controller", lambda: "Controller running" in out.read_text(), timeout=180)
        time.sleep(2)  # a job or two submitted
        p.send_signal(signal.SIGTERM)
        rc = p.wait(120)
        assert rc == 128 + signal.SIGTERM, out.read_text()[-2000:]
        assert "Local cluster stopped" in out.read_text()
        assert procs.pid_from_file(d / "run" / "slurmctld.pid", "slurmctld") is None
        assert not procs.pids_with_cwd_under("slurmstepd", d)
        assert not [i for i in range(5) if procs.port_in_use(port + i)], "ports left listening"
    finally:
        if p.poll() is None:
            p.kill()
        subprocess.run([sys.executable, "-m", "teiresias", "cluster", "down", "--dir", str(d)], capture_output=True)
