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
from wrappers.protocol import parse_comment
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
    r = subprocess.run([exe, "--app=a;b", "--wrap", "true"], capture_output=True, text=True,
                       env={**os.environ, "PATH": str(tmp_path)})
    assert r.returncode == 2
    assert "--app 'a;b': use letters, digits" in r.stderr and "Traceback" not in r.stderr


def _rec(jid: int, account: str, name: str, comment: str = "", phase: Phase = Phase.PENDING) -> JobRecord:
    return JobRecord(job_id=jid, account=account, user=account, name=name, comment=comment, gpus=1,
                     submit_time=0.0, phase=phase)


def test_prepare_puts_apps_and_stored_leases_on_the_jobs(tmp_path):
    cfg = _cfg(tmp_path, "policy: {name: themis, apps: {big: [bob]}}\n")
    c = Cluster.from_tiresias_spec(1, 1, 4)
    jobs = (Job(JobId(1), 1, 0.0, account="alice", model_name="s-1", state=JobState.RUNNING,
                placement=Placement.of({"s0n0": 1})),
            Job(JobId(2), 1, 0.0, account="bob", model_name="x"),
            Job(JobId(3), 1, 0.0, account="carol", model_name="y"))
    recs = {1: _rec(1, "alice", "s-1", "teiresias:dir=/d;app=hp"), 2: _rec(2, "bob", "x"), 3: _rec(3, "carol", "y")}
    leases.prepare(cfg, Snapshot(10.0, c, jobs), recs, {"leases": {1: 30.0, 2: 40.0}})
    assert [j.app for j in jobs] == ["hp", "big", ""]
    assert [j.lease_end for j in jobs] == [30.0, None, None]  # a lease only for a running job


def test_after_audits_expiries_and_the_auction_and_stores_state(tmp_path):
    c = Cluster.from_tiresias_spec(1, 1, 1)
    jobs = (Job(JobId(1), 1, 0.0, app="a", state=JobState.RUNNING, placement=Placement.of({"s0n0": 1}),
                executed_time=50.0, total_executed_time=50.0, lease_end=20.0),
            Job(JobId(2), 1, 0.0, app="b"))
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
