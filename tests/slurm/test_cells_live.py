"""HiveD cells on the real local Slurm cluster (4 nodes x 4 fake GPUs, two VCs by account).

The controller runs in this process, its VCs given by the config's ``cells``
key; the binding of virtual to physical cells is persisted in the state DB
between rounds (meta ``cells_state``). Jobs speak the preemption protocol: on
USR1 they write their Ack, the controller requeues them.

Shows (issue 6): a guaranteed 4-GPU job of VC A gets a whole node although VC
B's opportunistic jobs had spread over all nodes (exactly those on that node
are requeued through the checkpoint path); a node set DRAIN moves A's binding.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_plugin.config import load_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import StateStore
from teiresias.cells.scheduler import CellsPolicy
from teiresias.cells.state import META_KEY as CELLS_META_KEY
from teiresias.cells.state import CellsState
from teiresias.errors import SlurmUnreachable
from tests.conftest import REPO
from tests.helpers import PROTOCOL_JOB, poll
from wrappers.protocol import format_comment

pytestmark = pytest.mark.slurm


CELLS = {
    "cell_types": {
        "gpu": {},
        "gpu-pair": {"child": "gpu", "count": 2},
        "node": {"child": "gpu-pair", "count": 2, "node": True},
    },
    "physical_cells": [{"type": "node", "nodes": [f"node{i}"]} for i in range(1, 5)],
    "virtual_clusters": {
        "vc-a": {"accounts": ["team-a"], "quota": {"node": 1}},
        "vc-b": {"accounts": ["team-b"], "quota": {"gpu-pair": 1}},
    },
}


class CellsController:
    """An in-process controller whose policy is CellsPolicy; rounds run in a thread."""

    def __init__(self, cluster, tmp: Path, cells: dict = CELLS) -> None:
        # The VCs come in through the controller config's `cells` key, as on a site.
        (tmp / "cells.yaml").write_text(yaml.safe_dump(cells))
        cfg = {
            "partitions": ["gpu"],
            "policy": {"name": "las", "queues": [100000]},
            "poll_interval": 1,
            # Preemption at any time, of plain `sleep` jobs too (controller_support.ControllerProc).
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
            "cells": "cells.yaml",
        }
        (tmp / "teiresias.yaml").write_text(yaml.safe_dump(cfg))
        self.config = load_config(tmp / "teiresias.yaml")
        self.store = StateStore(self.config.state_db)
        self.ctl = Controller(self.config, cluster.backend, self.store, AuditLog(self.config.audit_log))
        assert isinstance(self.ctl.policy(), CellsPolicy)
        self.plan: Any = None
        self.rounds = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.ctl.round()
                with self._lock:
                    self.plan = result.plan
                    self.rounds += 1
            except SlurmUnreachable:
                pass  # slurmctld busy for a moment: the real run loop retries too
            except Exception as exc:  # surfaced by the test through .errors
                self.errors.append(exc)
            self._stop.wait(0.5)

    def wait_running(self, cluster, job: int, timeout: float = 90.0):
        """Wait for RUNNING, failing at once with the controller's error if a round raised."""
        deadline = time.monotonic() + timeout
        while True:
            assert not self.errors, f"controller round failed: {self.errors[0]!r}"
            try:
                return cluster.wait_for(job, "RUNNING", timeout=1.0)
            except AssertionError as exc:
                if time.monotonic() > deadline:
                    with self._lock:
                        why = self.plan.reasons.get(job) if self.plan is not None else None
                    raise AssertionError(f"{exc}; {self.rounds} rounds ran, policy says: {why}") from None

    def start(self) -> CellsController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def binding(self, vc: str) -> set[str]:
        with self._lock:
            plan = self.plan
        return {b.cell for b in plan.cells.bindings if b.vc == vc} if plan is not None else set()


def submit(cluster, tmp: Path, gpus: int, account: str, run_for: int = 600) -> int:
    base = tmp / "jobs"
    base.mkdir(exist_ok=True)
    return cluster.submit(
        PROTOCOL_JOB,
        "-p",
        "gpu",
        f"--gpus={gpus}",
        "-t",
        "10",
        f"--account={account}",
        f"--comment={format_comment({'dir': str(base)})}",
        env={"JOBBASE": str(base), "RUN_FOR": str(run_for)},
    )


def test_guaranteed_job_gets_a_whole_node_and_drain_moves_the_binding(cluster, tmp_path):
    ctl = CellsController(cluster, tmp_path).start()
    try:
        # VC B (quota: one 2-GPU pair) fills the cluster with 1-GPU jobs: 2 guaranteed, 14
        # opportunistic, on every node.
        b_jobs = [submit(cluster, tmp_path, 1, "team-b") for _ in range(16)]
        for j in b_jobs:
            ctl.wait_running(cluster, j)
        assert {cluster.job(j).nodes[0] for j in b_jobs} == set(cluster.nodes)

        # VC A's guaranteed 4-GPU job: a whole node, where only opportunistic B jobs were.
        a1 = submit(cluster, tmp_path, 4, "team-a", run_for=15)
        running = ctl.wait_running(cluster, a1, timeout=120)
        (node,) = running.nodes
        assert ctl.binding("vc-a") == {node}
        # The binding the next round starts from is the one persisted in the state DB.
        stored = CellsState.from_json(json.loads(ctl.store.get_meta(CELLS_META_KEY)))
        assert {b.cell for b in stored.bindings if b.vc == "vc-a"} == {node}
        requeued = [j for j in b_jobs if cluster.job(j).restart_count >= 1]
        assert len(requeued) == 4, "exactly the four B jobs on A's node go through checkpoint + requeue"
        assert not ctl.errors, ctl.errors

        # Set A's node DRAIN while a1 runs: a1 goes on and keeps its binding.
        subprocess.run(
            ["scontrol", "update", f"nodename={node}", "state=drain", "reason=cells-test"],
            env=cluster.env,
            check=True,
            capture_output=True,
            timeout=30,
        )
        poll("a1 still running on the drained node", lambda: cluster.job(a1).state == "RUNNING", 10)
        # a1 ends; A's next job is bound to another, healthy node (B's jobs there are requeued).
        cluster.wait_for(a1, "COMPLETED", timeout=60)
        a2 = submit(cluster, tmp_path, 4, "team-a", run_for=600)
        running2 = ctl.wait_running(cluster, a2, timeout=120)
        (node2,) = running2.nodes
        assert node2 != node
        poll("vc-a's binding moved off the drained node", lambda: ctl.binding("vc-a") == {node2}, 20)
        with ctl._lock:
            report = ctl.plan.report
        assert node in report.bad_nodes and report.vcs[0].lost_gpus == 0
        assert not ctl.errors, ctl.errors
    finally:
        ctl.stop()


def scontrol(cluster, *args: str) -> None:
    subprocess.run(["scontrol", *args], env=cluster.env, check=True, capture_output=True, timeout=30)


def test_a_recovered_node_restores_the_binding_by_migrating_a_guaranteed_job(cluster, tmp_path):
    """Issue 9 item 19: VC a (2 nodes) and VC b (4 pairs), all guaranteed, on 16 GPUs.

    node1 drains under two of b's jobs, one of them is cancelled, b's next job
    is bound to a pair on the node a would need; node1 resumes; a's second
    4-GPU job must not wait for b: one of b's jobs is requeued through the
    checkpoint path and started again on the node list of b's new binding.
    """
    cells = {
        **CELLS,
        "virtual_clusters": {
            "vc-a": {"accounts": ["team-a"], "quota": {"node": 2}},
            "vc-b": {"accounts": ["team-b"], "quota": {"gpu-pair": 4}},
        },
    }
    ctl = CellsController(cluster, tmp_path, cells).start()
    try:
        b_jobs = [submit(cluster, tmp_path, 2, "team-b") for _ in range(4)]
        for j in b_jobs:
            ctl.wait_running(cluster, j)
        a1 = submit(cluster, tmp_path, 4, "team-a")
        (a1_node,) = ctl.wait_running(cluster, a1).nodes
        b_on: dict[str, list[int]] = {}
        for j in b_jobs:
            b_on.setdefault(cluster.job(j).nodes[0], []).append(j)
        drained = next(n for n, js in sorted(b_on.items()) if len(js) == 2)  # buddy: two pairs per node
        gone, stays = b_on[drained]

        scontrol(cluster, "update", f"nodename={drained}", "state=drain", "reason=cells-item-19")
        subprocess.run(["scancel", str(gone)], env=cluster.env, check=True, capture_output=True, timeout=30)
        cluster.wait_for(gone, "CANCELLED", timeout=30)
        b5 = submit(cluster, tmp_path, 2, "team-b")
        (b5_node,) = ctl.wait_running(cluster, b5).nodes
        assert b5_node not in (drained, a1_node), "b's new pair is bound on the node a's quota needs"

        scontrol(cluster, "update", f"nodename={drained}", "state=resume")
        a2 = submit(cluster, tmp_path, 4, "team-a")
        (a2_node,) = ctl.wait_running(cluster, a2, timeout=180).nodes
        assert a2_node in (drained, b5_node)
        moved = stays if a2_node == drained else b5
        # The moved job went through checkpoint + requeue and was started on the node list
        # of b's new binding: the pair left free on the other node.
        again = cluster.wait_for(moved, "RUNNING", timeout=120, where=lambda j: j.restart_count >= 1)
        (target,) = {drained, b5_node} - {a2_node}
        assert again.nodes == (target,) and again.required_nodes == (target,)
        assert (Path(tmp_path / "jobs" / str(moved) / "ack.json")).exists(), "it was checkpointed (Ack)"
        assert cluster.job(stays if moved == b5 else b5).restart_count == 0, "only one job moved"
        poll(
            "b's binding follows its jobs",
            lambda: (
                {c.split("/")[0] for c in ctl.binding("vc-b")}
                == {
                    n for j in (stays, b5, *[x for x in b_jobs if x not in (gone, stays)]) for n in cluster.job(j).nodes
                }
            ),
            20,
        )
        assert {a1_node, a2_node}.isdisjoint({c.split("/")[0] for c in ctl.binding("vc-b")})
        assert not ctl.errors, ctl.errors
    finally:
        ctl.stop()


def test_cells_command_reads_drained_nodes_from_slurm_and_counts_partial_loss(cluster, tmp_path):
    """Issue 9 item 21: `teiresias cells --state DB` shows a node Slurm has DRAINing as bad, and
    the free GPU of vc-b's pair on it as lost (a 1-GPU job still runs in the pair)."""
    ctl = CellsController(cluster, tmp_path).start()
    try:
        b1 = submit(cluster, tmp_path, 1, "team-b")
        (node,) = ctl.wait_running(cluster, b1).nodes
        poll("vc-b's pair bound and stored", lambda: ctl.store.get_meta(CELLS_META_KEY) and ctl.binding("vc-b"), 20)
    finally:
        ctl.stop()
    scontrol(cluster, "update", f"nodename={node}", "state=drain", "reason=cells-item-21")
    env = {**cluster.env, "TEIRESIAS_CONFIG": str(tmp_path / "teiresias.yaml")}
    cmd = [
        str(REPO / ".venv" / "bin" / "teiresias"),
        "cells",
        "-c",
        str(tmp_path / "cells.yaml"),
        "-s",
        str(tmp_path / "state.db"),
    ]
    out = subprocess.run([*cmd, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["node_states"] == "slurm" and rep["bad_nodes"] == [node]
    vc_b = next(v for v in rep["vcs"] if v["name"] == "vc-b")
    assert vc_b["guaranteed_jobs"] == [b1]
    assert (vc_b["quota"][0]["lost"], vc_b["quota"][0]["lost_gpus"], vc_b["lost_gpus"]) == (1, 1, 1)
    text = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and f"bad nodes: {node};" in text.stdout, text.stdout + text.stderr
    assert f"node states: read from Slurm; down/drained there: {node}" in text.stdout
    # Without Slurm's word only --down counts, and the command says it did not ask.
    off = subprocess.run([*cmd, "--no-slurm"], env=env, capture_output=True, text=True, timeout=120)
    assert "bad nodes: none" in off.stdout and "node states: not read: --no-slurm" in off.stdout
