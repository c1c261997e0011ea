"""One definition of attained service and executed time (docs/job-states.md "Attained service").

``attained_gpu_seconds`` is all GPU-time received, everywhere; what the queue
thresholds compare (since the last promotion, Tiresias §3.2.3) is the attained
service, ``queue_service_gpu_seconds`` in the audit log.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller import accounting
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import JobRecord, StateStore
from teiresias.domain import Job, JobId, service
from tests.unit.slurm_double import InMemorySlurm

BUSY = [SlurmNode("node1", frozenset({"ALLOCATED"}), 2, 2, ("gpu",))]
DRAINED = [SlurmNode("node1", frozenset({"IDLE", "DRAIN"}), 2, 0, ("gpu",))]


def test_job_and_controller_records_use_the_one_definition() -> None:
    j = Job(JobId(1), 4, 0.0, executed_time=10.0, total_executed_time=30.0)
    assert j.attained_service == service.attained_service(4, 10.0) == 40.0
    assert j.attained_gpu_seconds == service.attained_gpu_seconds(4, 30.0) == 120.0
    # A record that ran 30 s in all, 10 s of them since its promotion at t=120 (run open since 100).
    r = JobRecord(
        1, gpus=4, closed_run_seconds=0.0, run_start=100.0, run_restart=0, promo_time=120.0, promo_executed=20.0
    )
    assert accounting.total_executed(r, 130.0) == 30.0 and accounting.executed_time(r, 130.0) == 10.0
    assert accounting.attained_service(r, 130.0) == j.attained_service
    assert accounting.attained_gpu_seconds(r, 130.0) == j.attained_gpu_seconds


def test_a_queue_change_after_a_promotion_logs_the_total_and_the_since_promotion_service(tmp_path) -> None:
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10], "promote_knob": 2},
        }
    )
    ctl = Controller(cfg, InMemorySlurm({"node1": 2}), StateStore(cfg.state_db), AuditLog(cfg.audit_log))
    sj: SlurmJob = InMemorySlurm({"node1": 2}).submit(1, 2, now=100.0)
    running = replace(sj, state="RUNNING", held=False, start_time=100.0, nodes=("node1",))
    ctl.round(now=110.0, slurm_jobs=[running], slurm_nodes=BUSY)  # 2 GPUs x 10 s: Q1 -> Q2
    requeued = replace(sj, restart_count=1)
    ctl.round(now=111.0, slurm_jobs=[requeued], slurm_nodes=DRAINED)
    assert list(ctl.round(now=140.0, slurm_jobs=[requeued], slurm_nodes=DRAINED).plan.promote) == [1]
    # Runs again from 150; at 160 its 10 s since the promotion (20 GPU-s) cross the threshold again.
    again = replace(requeued, state="RUNNING", held=False, start_time=150.0, nodes=("node1",))
    ctl.round(now=160.0, slurm_jobs=[again], slurm_nodes=BUSY)
    changes = [e for e in read_audit(tmp_path / "a.jsonl") if e["job"] == 1 and e["action"] == "queue"]
    assert [e["reason"] for e in changes] == ["Q1 -> Q2", "Q2 -> Q1", "Q1 -> Q2"]
    first, promoted, second = changes
    assert first["attained_gpu_seconds"] == first["queue_service_gpu_seconds"] == pytest.approx(20.0)
    assert promoted["attained_gpu_seconds"] == pytest.approx(20.0) and promoted["queue_service_gpu_seconds"] == 0.0
    assert second["attained_gpu_seconds"] == pytest.approx(40.0)  # all it received: 2 x (10 + 10) s
    assert second["queue_service_gpu_seconds"] == pytest.approx(20.0)  # since the promotion at 140
    # The same meaning as in the finished record and `teiresias queue`.
    rec = ctl.store.jobs()[1]
    assert accounting.attained_gpu_seconds(rec, 160.0) == pytest.approx(second["attained_gpu_seconds"])
