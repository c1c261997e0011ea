"""`teiresias explain`: the explanation built from records and the round summary (fast tests
beside the live one, tests/slurm/test_explain_live.py), and the CLI's bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.explain import META_KEY, explain, format_text
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import Placement
from tests.unit.round_support import NoBackend, held_job

SUMMARY = {
    "version": 1,
    "time": 1000.0,
    "round": 12,
    "policy": "las",
    "thresholds": [100.0],
    "promote_knob": None,
    "grace_seconds": 30.0,
    "nodes": {"n1": {"gpus": 4, "unavailable": 0, "free": 0}, "n2": {"gpus": 4, "unavailable": 0, "free": 1}},
    "running": {"1": [["n1", 4]], "2": [["n2", 3]]},
    "start": {},
    "preempted": {"4": [990.0, "preempted by higher-priority job 1"]},
    "leases": {},
    "vcs": [],
}


def records() -> dict[int, JobRecord]:
    return {
        # job 1: alice's, running 20 s on 4 GPUs (80 GPU-s of the 100 GPU-s threshold)
        1: JobRecord(
            1,
            user="alice",
            gpus=4,
            phase=Phase.RUNNING,
            run_start=980.0,
            run_restart=0,
            rank=0,
            planned=Placement.of([("n1", 4)]),
            submit_time=900.0,
        ),
        # job 2: bob's, running; bob may not see alice's and vice versa
        2: JobRecord(
            2, user="bob", gpus=3, phase=Phase.RUNNING, run_start=990.0, run_restart=0, rank=1, submit_time=910.0
        ),
        3: JobRecord(
            3, user="carol", gpus=2, phase=Phase.PENDING, rank=2, submit_time=920.0, reason="waiting for 2 GPUs, 1 free"
        ),
        4: JobRecord(
            4,
            user="carol",
            gpus=4,
            phase=Phase.PENDING,
            queue=1,
            rank=3,
            preemptions=1,
            closed_run_seconds=40.0,
            submit_time=800.0,
            reason="waiting for 4 GPUs, 1 free",
        ),
    }


def test_pending_job_behind_running_ones():
    e = explain(3, records(), SUMMARY, 1000.0, lambda r: True)
    assert e.state == "PENDING" and e.queue == "Q1" and (e.rank, e.ranked) == (3, 4)
    assert [(a.job, a.gpus, a.holds) for a in e.ahead] == [
        (1, 4, [{"node": "n1", "gpus": 4}]),
        (2, 3, [{"node": "n2", "gpus": 3}]),
    ]
    assert [(n["node"], n["free"]) for n in e.nodes] == [("n1", 0), ("n2", 1)]
    # Job 1 leaves Q1 at 100 GPU-s: 20 GPU-s more at 4 GPUs = 5 s after the plan.
    assert e.next_event is not None and e.next_event.at == 1005.0 and "job 1" in e.next_event.what
    assert "2 job(s) ahead (holding 7 GPU(s)" in e.summary and "1 GPU(s) free for its 2" in e.summary
    text = format_text(e, 1000.0)
    assert "ahead" in text and "n2 1/4 free" in text and "in 5s" in text


def test_jobs_ahead_count_the_gpus_they_hold_not_those_they_ask_for():
    """Issue 21 item 9: '4 job(s) ahead (holding 14 GPU(s))' added the GPUs the pending
    jobs ahead asked for; a pending job holds none."""
    e = explain(4, records(), SUMMARY, 1000.0, lambda r: True)
    assert [a.job for a in e.ahead] == [1, 2, 3]  # 3 is pending and asks for 2
    assert "3 job(s) ahead (holding 7 GPU(s)" in e.summary, e.summary


def test_a_job_slurm_started_since_the_last_round_is_not_said_to_wait_for_slurm():
    """Issue 21 item 9: right after a start the record is still STARTING while squeue says
    RUNNING; the answer said both 'Slurm RUNNING' and 'Slurm has not started it yet'."""
    recs = records()
    recs[3].phase, recs[3].planned = Phase.STARTING, Placement.of([("n2", 1)])
    e = explain(3, recs, SUMMARY, 1000.0, lambda r: True, slurm_state="RUNNING")
    text = format_text(e, 1000.0)
    assert "Slurm RUNNING" in text and "has not started" not in text, text
    assert e.summary.startswith("job 3 runs on") and "started it since" in (e.waiting_for_start or ""), (
        e.summary,
        e.waiting_for_start,
    )
    still = explain(3, recs, SUMMARY, 1000.0, lambda r: True, slurm_state="PENDING")
    assert "Slurm has not started it yet" in (still.waiting_for_start or "") and "is starting" in still.summary


def test_jobs_the_caller_may_not_see_are_counted_not_named():
    e = explain(3, records(), SUMMARY, 1000.0, lambda r: r.user == "carol")
    assert e.ahead == [] and e.ahead_hidden == {"jobs": 2, "gpus_held": 7}
    assert e.next_event is not None and "job 1" not in e.next_event.what and "another user" in e.next_event.what
    blob = json.dumps(e.to_json())
    assert "alice" not in blob and "bob" not in blob


def test_preempted_job_says_why_and_its_thresholds():
    e = explain(4, records(), SUMMARY, 1000.0, lambda r: True)
    assert e.queue == "Q2" and e.threshold_crossed == 100.0 and e.next_threshold is None
    assert e.attained_gpu_seconds == 160.0 and e.preemptions == 1
    assert e.last_preemption == {"time": 990.0, "reason": "preempted by higher-priority job 1"}


def test_running_job_placement_and_its_own_demotion():
    e = explain(1, records(), SUMMARY, 1000.0, lambda r: True)
    assert e.placement == [{"node": "n1", "gpus": 4}] and e.ahead == []
    assert "runs on 4 GPU(s) on n1" in e.summary
    assert e.next_event is not None and e.next_event.at == 1005.0 and "drops to Q2" in e.next_event.what


def test_without_a_summary_it_still_explains_and_says_what_is_missing():
    e = explain(3, records(), None, 1000.0, lambda r: True)
    assert e.nodes == [] and e.notes and "not recorded a plan" in e.notes[0]


def test_a_round_persists_its_summary_and_carries_preemptions_while_active(tmp_path):
    cfg = parse_config({"state_db": str(tmp_path / "s.db"), "audit_log": str(tmp_path / "a.jsonl")})
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))
    ctl.store.set_meta(META_KEY, json.dumps({"preempted": {"3": [1.0, "x"], "99": [1.0, "gone"]}}))
    sj = held_job(3)
    ctl.round(now=200.0, slurm_jobs=[sj], slurm_nodes=[SlurmNode("n1", frozenset({"IDLE", "DRAIN"}), 4, 0, ("gpu",))])
    s = json.loads(ctl.store.get_meta(META_KEY))
    assert s["round"] == 1 and s["thresholds"] == [3600.0]
    assert s["nodes"] == {"n1": {"gpus": 4, "unavailable": 4, "free": 0}}  # drained
    assert s["preempted"] == {"3": [1.0, "x"]}  # job 99 is no longer active


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "teiresias", "explain", *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def test_cli_bad_and_unknown_job_ids_are_exit_2_and_one_line(tmp_path):
    db = tmp_path / "s.db"
    StateStore(db).close()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"state_db": str(db), "audit_log": str(tmp_path / "a.jsonl")}))
    for arg, msg in (("x1", "is not a job id"), ("0", "is not a job id"), ("77", "77: no such managed job")):
        p = _cli(arg, "-c", str(cfg), "--no-slurm", cwd=tmp_path)
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr
    h = _cli("--help", cwd=tmp_path)
    assert h.returncode == 0 and "teiresias explain 42" in h.stdout and "--json" in h.stdout


def test_vc_quota_and_lease_from_the_summary():
    summary = {
        **SUMMARY,
        "leases": {"1": 1003.0},
        "vcs": [
            {
                "name": "vision",
                "accounts": ["cv"],
                "quota_gpus": 8,
                "guaranteed_gpus": 4,
                "opportunistic_gpus": 2,
                "guaranteed_jobs": [1],
                "opportunistic_jobs": [],
            }
        ],
    }
    recs = records()
    recs[1].account = "cv"
    e = explain(1, recs, summary, 1000.0, lambda r: True)
    assert e.vc == {
        "name": "vision",
        "quota_gpus": 8,
        "guaranteed_gpus": 4,
        "opportunistic_gpus": 2,
        "this_job": "guaranteed",
    }
    # The lease (3 s) ends before its demotion (5 s): that is the next event.
    assert e.lease_end == 1003.0 and e.next_event is not None and e.next_event.at == 1003.0
    assert "lease ends" in e.next_event.what
    assert explain(3, recs, summary, 1000.0, lambda r: True).vc is None  # account in no VC
    text = format_text(e, 1000.0)
    assert "vision: 4/8 guaranteed GPUs used" in text and "lease" in text


def test_a_job_the_plan_starts_waits_for_preempted_gpus():
    summary = {**SUMMARY, "start": {"3": [["n2", 2]]}}
    recs = records()
    recs[3].reason = "waiting for preempted jobs to release 1 GPU(s) on n2"
    e = explain(3, recs, summary, 1000.0, lambda r: True)
    assert e.waiting_for_start == (
        "the last plan starts it on 2 GPU(s) on n2; waiting for preempted jobs to release 1 GPU(s) on n2"
    )
    assert [n["planned_for_it"] for n in e.nodes] == [0, 2]
