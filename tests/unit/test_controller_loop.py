"""A controller round on injected Slurm data (no Slurm needed where no action is due), and the CLI's bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import Phase, StateStore
from tests.conftest import REPO
from tests.unit.round_support import NoBackend, held_job

DRAINED = [SlurmNode("node1", frozenset({"IDLE", "DRAIN"}), 4, 0, ("gpu",))]


def make(tmp_path: Path) -> Controller:
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
        }
    )
    return Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))


def test_vanished_job_is_one_line_and_its_record_is_closed(tmp_path, caplog):
    ctl = make(tmp_path)
    r1 = ctl.round(now=200.0, slurm_jobs=[held_job(1), held_job(2)], slurm_nodes=DRAINED)
    assert r1.actions == [] and set(r1.plan.order) == {1, 2}
    assert r1.plan.start == {}  # the only node is drained: nothing can start
    caplog.set_level("WARNING", logger="teiresias.controller")
    r2 = ctl.round(now=205.0, slurm_jobs=[held_job(2)], slurm_nodes=DRAINED)
    assert r2.notes == ["job 1: vanished from Slurm between two rounds; record closed"]
    assert [m for m in caplog.messages if "vanished" in m] == [
        "[job 1] vanished from Slurm between two rounds; record closed"
    ]
    recs = ctl.store.jobs(active_only=False)
    assert recs[1].phase is Phase.FINISHED and recs[1].final_state == "VANISHED"
    assert recs[2].phase is Phase.PENDING
    # (its timeline's "submitted" line aside: audit.STAGES)
    assert [e["action"] for e in read_audit(tmp_path / "a.jsonl") if e["job"] == 1 and e["action"] != "timeline"] == [
        "vanished"
    ]
    # The next round says nothing more about it: no crash loop, no repeated line.
    r3 = ctl.round(now=210.0, slurm_jobs=[held_job(2)], slurm_nodes=DRAINED)
    assert r3.notes == [] and list(r3.plan.order) == [2]


def test_round_json_has_plan_and_actions(tmp_path):
    out = make(tmp_path).round(now=200.0, slurm_jobs=[held_job(3)], slurm_nodes=DRAINED).to_json()
    assert set(out) >= {"plan", "actions", "time", "round"}
    assert out["plan"]["order"] == [3] and out["plan"]["queues"] == {"3": 0}
    json.dumps(out)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "teiresias", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_bad_config_is_exit_2_and_one_line(tmp_path):
    for text, needle in [
        ("colour: red\n", "unknown key 'colour'"),
        ("policy: {queues: [600, 60]}\n", "strictly increasing"),
    ]:
        cfg = tmp_path / "bad.yaml"
        cfg.write_text(text)
        for cmd in (["controller", "run", "--once", "-c", str(cfg)], ["queue", "-c", str(cfg)]):
            p = run_cli(*cmd)
            lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
            assert p.returncode == 2, p.stderr
            assert len(lines) == 1 and needle in lines[0] and str(cfg) in lines[0], p.stderr


def test_queue_without_state_says_what_to_do(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"state_db: {tmp_path}/none.db\n")
    p = run_cli("queue", "-c", str(cfg), "--no-slurm")
    assert p.returncode == 2 and "controller run" in p.stderr


IDLE = [SlurmNode("node1", frozenset({"IDLE"}), 4, 0, ("gpu",))]


def test_dry_run_plans_a_start_but_touches_neither_slurm_nor_the_state(tmp_path):
    db = tmp_path / "s.db"
    cfg = parse_config({"state_db": str(db), "policy": {"name": "las", "queues": [10]}})
    StateStore(db).close()
    ctl = Controller(cfg, NoBackend(), StateStore(db, readonly_copy=True), AuditLog(None), dry_run=True)
    r = ctl.round(now=200.0, slurm_jobs=[held_job(4)], slurm_nodes=IDLE)
    assert list(r.plan.start) == [4]
    assert [(a.job, a.action, a.ok) for a in r.actions] == [(4, "start", None)]
    assert StateStore(db).jobs(active_only=False) == {}


def finished(job_id: int, gpus: int, start: float, end: float) -> SlurmJob:
    from dataclasses import replace

    return replace(
        held_job(job_id), state="COMPLETED", held=False, gpus=gpus, start_time=start, end_time=end, nodes=("node1",)
    )


def test_gittins_runs_as_las_until_a_job_finishes_then_learns_from_it(tmp_path):
    cfg = parse_config({"state_db": str(tmp_path / "s.db"), "policy": {"name": "gittins", "queues": [100]}})
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(None))
    assert ctl.policy().name == "las"  # Tiresias Pseudocode 1: no distribution -> LAS
    running = SlurmJob(
        **{
            **{f: getattr(held_job(5), f) for f in held_job(5).__slots__},
            "state": "RUNNING",
            "held": False,
            "start_time": 100.0,
            "nodes": ("node1",),
        }
    )
    drained = [SlurmNode("node1", frozenset({"ALLOCATED"}), 4, 2, ("gpu",))]
    ctl.round(now=120.0, slurm_jobs=[running], slurm_nodes=drained)
    ctl.round(now=160.0, slurm_jobs=[finished(5, 2, 100.0, 150.0)], slurm_nodes=IDLE)
    assert ctl.store.samples() == [100.0]  # 2 GPUs x 50 s
    assert ctl.policy().name == "gittins"


def test_a_no_requeue_job_is_not_preempted(tmp_path):
    """Slurm refuses to requeue it: the policy sees it protected for good (Job.protected_until,
    issue 20 B12) and never plans its preemption, so nothing waits for it to leave."""
    from dataclasses import replace

    ctl = make(tmp_path)
    busy = [SlurmNode("node1", frozenset({"ALLOCATED"}), 4, 4, ("gpu",))]
    a = replace(held_job(1), state="RUNNING", held=False, gpus=4, requeue=False, start_time=100.0, nodes=("node1",))
    b = replace(held_job(2), gpus=4, submit_time=150.0)
    for now in (200.0, 203.0):
        r = ctl.round(now=now, slurm_jobs=[a, b], slurm_nodes=busy)
        assert list(r.plan.preempt) == [] and r.actions == []
    assert ctl.store.jobs()[2].reason == "waiting for 4 GPUs, 0 free"


def test_no_gpus_wait_idle_for_a_no_requeue_jobs_preemption(tmp_path):
    """The soak (seed 20, j14): a plan counting on preempting a --no-requeue job, which Slurm
    refuses (preempt-skipped), kept the free GPUs it gave its beneficiary idle until that job
    ended. Now the plan never counts on it: the 8-GPU job waits, the 2-GPU one behind it
    starts on the free node at once."""
    from dataclasses import replace

    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
        }
    )
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log), dry_run=True)
    nodes = [
        SlurmNode("node1", frozenset({"ALLOCATED"}), 4, 4, ("gpu",)),
        SlurmNode("node2", frozenset({"IDLE"}), 4, 0, ("gpu",)),
    ]
    stays = replace(held_job(1), state="RUNNING", held=False, gpus=4, requeue=False, start_time=100.0, nodes=("node1",))
    big, small = held_job(2, gpus=8, submit_time=150.0), held_job(3, gpus=2, submit_time=160.0)
    r = ctl.round(now=200.0, slurm_jobs=[stays, big, small], slurm_nodes=nodes)  # job 1 in Q2 by now
    assert list(r.plan.preempt) == []
    assert list(r.plan.start) == [3] and r.plan.start[3].nodes == ("node2",)


def test_a_job_asked_per_node_is_planned_in_its_own_shape(tmp_path):
    """The soak (seed 20, j19: `-N 4 --gres=gpu:2` while node2 was drained): the plan gave the
    8 GPUs as 4 + 4 on two free nodes, which the start cannot use (it keeps the job's shape:
    4 nodes x 2), so they sat promised and idle (and a job was preempted for it). The
    policy now places such a job in its shape or not at all: the 2-GPU job behind it runs."""
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
        }
    )
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log), dry_run=True)
    nodes = [
        SlurmNode("node1", frozenset({"ALLOCATED"}), 4, 4, ("gpu",)),
        SlurmNode("node2", frozenset({"IDLE", "DRAIN"}), 4, 0, ("gpu",)),
        SlurmNode("node3", frozenset({"IDLE"}), 4, 0, ("gpu",)),
        SlurmNode("node4", frozenset({"IDLE"}), 4, 0, ("gpu",)),
    ]
    busy = held_job(1, state="RUNNING", held=False, gpus=4, start_time=100.0, nodes=("node1",))
    shaped = held_job(2, gpus=8, num_nodes=4, gpus_per_node=2, submit_time=150.0)
    small = held_job(3, gpus=2, submit_time=160.0)
    r = ctl.round(now=200.0, slurm_jobs=[busy, shaped, small], slurm_nodes=nodes)
    assert list(r.plan.preempt) == [] and 2 not in r.plan.start
    assert list(r.plan.start) == [3]


def test_a_starving_job_is_promoted_and_its_tj_and_deltaj_restart(tmp_path):
    from dataclasses import replace

    from slurm_plugin.controller.accounting import executed_time, total_executed, waiting_time

    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10], "promote_knob": 2},
        }
    )
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))
    busy = [SlurmNode("node1", frozenset({"ALLOCATED"}), 2, 2, ("gpu",))]
    running = replace(held_job(1), state="RUNNING", held=False, start_time=100.0, nodes=("node1",))
    ctl.round(now=110.0, slurm_jobs=[running], slurm_nodes=busy)  # 2 GPUs x 10 s: demoted to Q2
    requeued = replace(held_job(1), restart_count=1)
    ctl.round(now=111.0, slurm_jobs=[requeued], slurm_nodes=DRAINED)
    r = ctl.store.jobs()[1]
    assert r.queue == 1 and total_executed(r, 111.0) == 10.0
    # Waiting (from submission at t=100) reaches 2 x t_J = 20 s of waiting at t=130.
    res = ctl.round(now=140.0, slurm_jobs=[requeued], slurm_nodes=DRAINED)
    assert list(res.plan.promote) == [1]
    r = ctl.store.jobs()[1]
    assert r.promo_time == 140.0 and executed_time(r, 140.0) == 0.0 and waiting_time(r, 140.0) == 0.0
    assert total_executed(r, 140.0) == 10.0  # what it really ran is kept
    assert [e["action"] for e in read_audit(tmp_path / "a.jsonl") if e["job"] == 1].count("promote") == 1
