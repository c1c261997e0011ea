"""Unit tests beside the live test (tests/slurm/test_themis_live.py) of themis' controller glue:
config keys, ``tsbatch --app`` in the job comment, apps and leases carried to the snapshot, the
audit lines, and the ``teiresias queue`` fields. The live test runs them on a real Slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin.config import load_config
from slurm_plugin.controller import leases
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import default_policy
from slurm_plugin.controller.state import JobRecord, Phase
from slurm_plugin.controller.view import build_rows
from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.errors import ConfigError
from wrappers.batchscript import JobSetup
from wrappers.protocol import CheckpointRecord, RunRecord, append_record, append_run, job_dir, parse_comment
from wrappers.sbatch_args import parse
from wrappers.tsbatch import build_comment


def _cfg(tmp_path: Path, text: str):
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return load_config(p)


def test_config_sets_lease_knob_and_apps(tmp_path):
    cfg = _cfg(tmp_path, "policy: {name: themis, lease: 20, fairness_knob: 0.5, apps: {search: [alice, carol]}}\n")
    assert (cfg.policy.lease, cfg.policy.fairness_knob) == (20, 0.5)
    assert dict(cfg.policy.apps) == {"alice": "search", "carol": "search"}
    pol = default_policy(cfg, None)
    assert (pol.name, pol.lease, pol.fairness_knob) == ("themis", 20, 0.5)
    for text, needle in [
        ("policy: {name: themis, fairness_knob: 1}\n", "policy.fairness_knob: must be in \\(0, 1\\)"),
        ("policy: {name: themis, lease: -5}\n", "policy.lease"),
        ("policy: {name: themis, apps: {a: [x], b: [x]}}\n", "account x is already in app a"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            _cfg(tmp_path, text)


def test_tsbatch_app_goes_into_the_comment():
    p = parse(["--app", "lr-search", "-G", "1", "job.sh"])
    assert p.own["app"] == "lr-search" and p.script == "job.sh"
    c = build_comment(JobSetup(None, "/b", 0, False, 90), None, "lr-search")
    assert parse_comment(c)["app"] == "lr-search"


def test_tsbatch_refuses_an_app_name_that_would_break_the_comment(tmp_path):
    exe = str(Path(sys.executable).with_name("tsbatch"))
    r = subprocess.run(
        [exe, "--app=a;b", "--wrap", "true"], capture_output=True, text=True, env={**os.environ, "PATH": str(tmp_path)}
    )
    assert r.returncode == 2
    assert "--app 'a;b': use letters, digits" in r.stderr and "Traceback" not in r.stderr


def _rec(jid: int, account: str, name: str, comment: str = "", phase: Phase = Phase.PENDING) -> JobRecord:
    return JobRecord(
        job_id=jid, account=account, user=account, name=name, comment=comment, gpus=1, submit_time=0.0, phase=phase
    )


def test_prepare_puts_apps_and_stored_leases_on_the_jobs(tmp_path):
    cfg = _cfg(tmp_path, "policy: {name: themis, apps: {big: [bob]}}\n")
    c = Cluster.from_tiresias_spec(1, 1, 4)
    jobs = (
        Job(
            JobId(1),
            1,
            0.0,
            account="alice",
            model_name="s-1",
            state=JobState.RUNNING,
            placement=Placement.of({"s0n0": 1}),
        ),
        Job(JobId(2), 1, 0.0, account="bob", model_name="x"),
        Job(JobId(3), 1, 0.0, account="carol", model_name="y"),
    )
    recs = {1: _rec(1, "alice", "s-1", "teiresias:dir=/d;app=hp"), 2: _rec(2, "bob", "x"), 3: _rec(3, "carol", "y")}
    leases.prepare(cfg, Snapshot(10.0, c, jobs), recs, {"leases": {1: 30.0, 2: 40.0}})
    assert [j.app for j in jobs] == ["hp", "big", ""]
    assert [j.lease_end for j in jobs] == [30.0, None, None]  # a lease only for a running job


def test_after_audits_expiries_and_the_auction_and_stores_state(tmp_path):
    c = Cluster.from_tiresias_spec(1, 1, 1)
    jobs = (
        Job(
            JobId(1),
            1,
            0.0,
            app="a",
            state=JobState.RUNNING,
            placement=Placement.of({"s0n0": 1}),
            executed_time=50.0,
            total_executed_time=50.0,
            lease_end=20.0,
        ),
        Job(JobId(2), 1, 0.0, app="b"),
    )
    snap = Snapshot(30.0, c, jobs)
    pol = default_policy(_cfg(tmp_path, "policy: {name: themis, lease: 20}\n"), None)
    plan = pol.decide(snap)
    assert plan.preempt == (JobId(1),) and set(plan.start) == {JobId(2)}
    log = tmp_path / "audit.jsonl"
    audit = AuditLog(log)
    stored = json.loads(leases.after(snap, plan, {"leases": {1: 20.0}}, audit, 30.0))
    audit.close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["action"] for x in lines] == ["lease-expired", "auction"]
    assert set(lines[1]["rho"]) == {"a", "b"} and lines[1]["started"] == [2]
    assert stored["leases"] == {"2": 50.0} and stored["apps"] == {"1": "a", "2": "b"}
    state = leases.load(json.dumps(stored))
    rows = build_rows([_rec(2, "bob", "x", phase=Phase.RUNNING), _rec(1, "al", "s-1")], 31.0, None, state)
    by_id = {r.job_id: r.to_json() for r in rows}
    assert by_id[2]["app"] == "b" and by_id[2]["lease_ends"] == 50.0 and by_id[2]["rho"] > 0
    assert by_id[1]["lease_ends"] is None
    # Without themis state the app is still shown, by the default rule.
    assert build_rows([_rec(7, "al", "s-1")], 1.0)[0].app == "al/s"


def test_tsbatch_iterations_go_into_the_comment_and_bad_ones_are_refused(tmp_path):
    p = parse(["--iterations", "500", "-G", "1", "job.sh"])
    assert p.own["iterations"] == "500" and p.script == "job.sh"
    c = build_comment(JobSetup(None, "/b", 0, False, 90), None, "", 500)
    assert parse_comment(c)["iters"] == "500"
    assert "iters" not in parse_comment(build_comment(JobSetup(None, "/b", 0, False, 90), None))
    exe = str(Path(sys.executable).with_name("tsbatch"))
    for bad in ("0", "ten"):
        r = subprocess.run(
            [exe, f"--iterations={bad}", "--wrap", "true"],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": str(tmp_path)},
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"--iterations needs a whole number of optimizer steps >= 1, not '{bad}'" in r.stderr


def _ckpt(restart: int, step: int) -> CheckpointRecord:
    return CheckpointRecord(
        job_id=7, restart_count=restart, step=step, path=f"/c/{step}", bytes=1, seconds=0.1, time=0.0, reason="preempt"
    )


def _run(restart: int, steps: int, median: float) -> RunRecord:
    return RunRecord(job_id=7, restart_count=restart, steps=steps, median_step_s=median, nodes=1, time=0.0)


def test_work_left_from_the_hooks_files(tmp_path):
    # Real files written by the hooks' own protocol helpers. Run 0 timed 120 steps and was
    # preempted with a checkpoint at step 100 (the 20 after it were lost); run 1 resumed there
    # and has timed 50 steps at 0.4 s: 150 of 1000 done, 850 x 0.4 s left.
    base = tmp_path / "jobs"
    jobdir = job_dir(base, 7)
    jobdir.mkdir(parents=True)
    rec = _rec(7, "alice", "s-1", build_comment(JobSetup(None, str(base), 0, False, 90), None, "", 1000), Phase.RUNNING)
    assert leases.record_work_left(rec) is None  # no step timed yet: the policy keeps its estimate
    append_run(jobdir, _run(0, 60, 0.5))
    append_run(jobdir, _run(0, 120, 0.5))
    append_record(jobdir, _ckpt(0, 100))
    assert leases.record_work_left(rec) == pytest.approx((1000 - 120) * 0.5)
    append_run(jobdir, _run(1, 50, 0.4))
    assert leases.record_work_left(rec) == pytest.approx((1000 - 150) * 0.4)
    append_record(jobdir, _ckpt(1, 1000))  # done: nothing left, never negative
    assert leases.record_work_left(rec) == 0.0
    # No --iterations, or no job directory: unknown.
    assert leases.record_work_left(_rec(7, "alice", "s-1", f"teiresias:dir={base}")) is None
    assert leases.record_work_left(_rec(7, "alice", "s-1", "")) is None


def test_measured_work_left_reaches_rho(tmp_path):
    # prepare puts it on the job, and Equation 1 uses it instead of the elapsed-time guess.
    base = tmp_path / "jobs"
    jobdir = job_dir(base, 1)
    jobdir.mkdir(parents=True)
    append_run(jobdir, _run(0, 100, 2.0))
    cfg = _cfg(tmp_path, "policy: {name: themis}\n")
    c = Cluster.from_tiresias_spec(1, 1, 4)
    job = Job(
        JobId(1),
        1,
        0.0,
        account="alice",
        model_name="s-1",
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": 1}),
        total_executed_time=200.0,
        executed_time=200.0,
    )
    comment = build_comment(JobSetup(None, str(base), 0, False, 90), None, "", 400)
    leases.prepare(cfg, Snapshot(300.0, c, [job]), {1: _rec(1, "alice", "s-1", comment, Phase.RUNNING)}, {})
    assert job.measured_left == pytest.approx(600.0)  # (400 - 100) x 2 s
    pol = default_policy(cfg, None)
    _, inputs, _ = pol.app_rhos(Snapshot(300.0, c, [job]))
    assert inputs["alice/s"].work_left == pytest.approx(600.0)  # not 200 (as long again as it ran)
