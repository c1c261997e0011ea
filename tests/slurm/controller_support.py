"""What the live controller tests share: the controller as a subprocess, and
job submission helpers. Their fixtures (lua_cluster, cluster, make_controller)
are in tests/slurm/conftest.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from slurm_plugin.controller.audit import read_audit
from slurm_plugin.controller.state import JobRecord, StateStore
from tests.conftest import REPO
from tests.helpers import PROTOCOL_JOB, poll
from wrappers.protocol import format_comment

LUA = REPO / "etc" / "job_submit.lua"
TEIRESIAS = [sys.executable, "-m", "teiresias"]


class ControllerProc:
    """`teiresias controller run` as a subprocess of the test (so it can be kill -9'ed)."""

    def __init__(self, tmp: Path, cluster, **overrides: Any) -> None:
        self.tmp = tmp
        self.cluster = cluster
        cfg: dict[str, Any] = {
            "partitions": ["gpu"],
            "policy": {"name": "las", "queues": [8]},
            "placement": "consolidate",
            "poll_interval": 1,
            # The paper's preemption at any time, also of plain sbatch jobs (most tests preempt
            # `sleep` jobs within seconds); the minimum run times are tested on their own.
            "preemption": {
                "grace_seconds": 20,
                "start_timeout_seconds": 20,
                "min_run_seconds": 0,
                "plain_min_run_seconds": 0,
            },
            "state_db": str(tmp / "state.db"),
            "audit_log": str(tmp / "audit.jsonl"),
            "backend": "cli",
            "slurm_conf": str(cluster.conf),
        }
        for k, v in overrides.items():
            if isinstance(v, dict):
                cfg[k] = {**cfg.get(k, {}), **v}
            else:
                cfg[k] = v
        self.config = tmp / "teiresias.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.log = tmp / "controller.log"
        self.proc: subprocess.Popen | None = None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``teiresias ARGS -c CONFIG`` on this controller's config and cluster, output
        captured: the one-shot commands (``controller run --once``, ``queue``)."""
        return subprocess.run(
            [*TEIRESIAS, *args, "-c", str(self.config)],
            capture_output=True,
            text=True,
            env=self.cluster.env,
            cwd=REPO,
            timeout=60,
        )

    def start(self, *args: str) -> ControllerProc:
        """``args``: extra `controller run` options (e.g. ``--standby``)."""
        self.proc = subprocess.Popen(
            [*TEIRESIAS, "controller", "run", "-c", str(self.config), *args],
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
            env={**self.cluster.env, "PYTHONUNBUFFERED": "1"},
            cwd=REPO,
        )
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def records(self) -> dict[int, JobRecord]:
        db = self.tmp / "state.db"
        if not db.exists():
            return {}
        store = StateStore(db, readonly_copy=True)
        try:
            return store.jobs(active_only=False)
        finally:
            store.close()

    def rec(self, job_id: int) -> JobRecord | None:
        return self.records().get(job_id)

    def audit(self, job: int | None = None, action: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in read_audit(self.tmp / "audit.jsonl")
            if (job is None or e["job"] == job) and (action is None or e["action"] == action)
        ]

    def logtext(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def submit_protocol_job(
    cluster,
    tmp: Path,
    gpus: int,
    *,
    ack: bool = True,
    run_for: int = 600,
    name: str = "pj",
    extra: tuple[str, ...] = (),
) -> int:
    base = tmp / "jobs"
    base.mkdir(exist_ok=True)
    return cluster.submit(
        PROTOCOL_JOB,
        "-p",
        "gpu",
        f"--gpus={gpus}",
        "-t",
        "10",
        f"--job-name={name}",
        f"--comment={format_comment({'dir': str(base)})}",
        *extra,
        env={"JOBBASE": str(base), "ACK": "1" if ack else "0", "RUN_FOR": str(run_for)},
    )


def submit_sleep(cluster, gpus: int, seconds: int = 600, partition: str = "gpu", *extra: str) -> int:
    return cluster.submit(f"sleep {seconds}", "-p", partition, f"--gpus={gpus}", "-t", "10", *extra)


def rounds(ctl) -> int:
    db = ctl.tmp / "state.db"
    if not db.exists():
        return 0
    store = StateStore(db, readonly_copy=True)
    try:
        return int(store.get_meta("rounds", "0") or 0)
    finally:
        store.close()


def wait_rounds(ctl, n: int, timeout: float = 60.0) -> None:
    """Let the controller do ``n`` more rounds (each one sees Slurm anew)."""
    target = rounds(ctl) + n
    poll(f"{n} controller rounds", lambda: rounds(ctl) >= target, timeout)


def queue_rows(ctl, cluster) -> dict[int, dict]:
    q = subprocess.run(
        [*TEIRESIAS, "queue", "--json", "-c", str(ctl.config)],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        timeout=60,
    )
    assert q.returncode == 0, q.stderr
    return {r["job_id"]: r for r in json.loads(q.stdout)}


def tie_files(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """The files of SJF-BSBF's Theorem 1 tie (issue 22 item 4): a GPU-time distribution
    where every past job took 600 GPU-s (samples), a checkpoint base, a release file and
    a shard job's batch script that writes its CUDA_VISIBLE_DEVICES to env.<job> and
    waits for the release file. Returns (samples, base, release, batch)."""
    samples = tmp_path / "gput.csv"
    samples.write_text("duration\n" + "600\n" * 20)
    base, release = tmp_path / "ckpt", tmp_path / "release"
    batch = tmp_path / "tie.sh"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n#SBATCH -p gpu\n#SBATCH -t 10\n"
        f'echo "$CUDA_VISIBLE_DEVICES" > {tmp_path}/env.$SLURM_JOB_ID\n'
        f"while [ ! -e {release} ]; do sleep 0.2; done\n"
    )
    return samples, base, release, batch
