"""PACKLIMIT from history (Tiresias §3.3.2) in the controller: run outcomes from the
jobs' runs.jsonl, their baselines, the refit and the policy rebuilt with it.
Real StateStore, JobRecord, ProfileStore, audit log and run files on tmp_path."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from profiler.aggregate import Profile
from profiler.store import ProfileStore, model_key
from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.loop import Controller, default_policy
from slurm_plugin.controller.packlimit import current_packlimit, min_nodes, placement_history, run_outcomes
from slurm_plugin.controller.state import JobRecord, RunOutcome, StateStore
from teiresias.errors import ConfigError
from tests.unit.round_support import NoBackend, held_job
from wrappers.protocol import RunRecord, append_run, format_comment, job_dir, read_runs


def _run(job_id: int, restart: int, step_s: float, nodes: int) -> RunRecord:
    return RunRecord(
        job_id=job_id, restart_count=restart, steps=50, median_step_s=step_s, nodes=nodes, time=1000.0 + restart
    )


def _row(job_id: int, skew: float | None, step_s: float, nodes: int, model: str = "m", gpus: int = 4) -> RunOutcome:
    return RunOutcome(
        job_id=job_id,
        restart_count=0,
        model=model,
        gpus=gpus,
        nodes=nodes,
        min_nodes=min_nodes(gpus, 4),
        skew=skew,
        median_step_s=step_s,
        steps=50,
        time=float(job_id),
    )


def test_min_nodes_is_the_ceiling_of_gpus_over_gpus_per_node():
    assert [min_nodes(g, 4) for g in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert min_nodes(4, 0) == 1  # no node known: never call a run spread


def test_run_outcomes_leave_out_the_open_run_and_unknown_placements():
    rec = JobRecord(job_id=5, name="vgg", gpus=4, skew=0.7, run_start=50.0, run_restart=2)
    runs = {0: _run(5, 0, 1.0, 1), 1: _run(5, 1, 1.6, 0), 2: _run(5, 2, 1.2, 2), 3: _run(6, 3, 1.0, 1)}
    out = run_outcomes(rec, runs, gpus_per_node=4)
    # run 1: no node count and no planned placement; run 2 is still running; run 3 is another job's line.
    assert [(o.restart_count, o.nodes, o.min_nodes, o.consolidated, o.model, o.skew) for o in out] == [
        (0, 1, 1, True, "vgg", 0.7)
    ]
    with_plan = run_outcomes(rec, runs, gpus_per_node=4, planned_nodes=3)
    assert [(o.restart_count, o.nodes, o.consolidated) for o in with_plan] == [(0, 1, True), (1, 3, False)]


def test_read_runs_keeps_the_last_line_of_each_run_and_skips_torn_lines(tmp_path):
    append_run(tmp_path, _run(5, 0, 1.0, 1))
    append_run(tmp_path, replace(_run(5, 0, 1.1, 1), steps=90))
    with open(tmp_path / "runs.jsonl", "a") as f:
        f.write('{"job_id": 5, "restart_co')  # killed mid-append
    assert read_runs(tmp_path) == {0: replace(_run(5, 0, 1.1, 1), steps=90)}
    assert read_runs(tmp_path / "nowhere") == {}


def test_history_needs_a_skew_and_a_consolidated_baseline_of_the_same_model_and_size():
    rows = [
        _row(1, 0.7, 1.0, 1),
        _row(2, 0.7, 3.0, 1),  # baseline: median(1.0, 3.0) = 2.0
        _row(3, 0.7, 3.0, 2),  # spread: 1.5x its baseline
        _row(4, None, 3.0, 2),  # no skew: waits for a profile
        _row(5, 0.1, 1.0, 2, model="other"),  # no consolidated run of 'other' yet
        _row(6, 0.7, 9.0, 3, gpus=8),
    ]  # 8-GPU runs have no 8-GPU baseline
    hist = placement_history(rows)
    assert [(h.skew, h.consolidated, h.slowdown) for h in hist] == [
        (0.7, True, 0.5),
        (0.7, True, 1.5),
        (0.7, False, 1.5),
    ]


def _cfg(tmp_path, **extra):
    return parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "placement": "profile",
            "policy": {"name": "las", "queues": [10]},
            **extra,
        }
    )


# Baselines of model m (1.0 s on one node) and three spread runs: two that did not
# suffer (skew 0.2, 0.3) and one that did (skew 0.8): a 0.3 | 0.8 split.
HISTORY = [_row(1, 0.2, 1.0, 1), _row(2, 0.2, 1.0, 2), _row(3, 0.3, 1.05, 2), _row(4, 0.8, 1.6, 2)]


def test_current_packlimit_default_config_and_history(tmp_path):
    fit = current_packlimit(_cfg(tmp_path, packlimit_min_samples=4), HISTORY)
    assert (fit.packlimit, fit.source, fit.samples) == (0.5, "default", 3)
    fit = current_packlimit(_cfg(tmp_path, packlimit=0.6, packlimit_min_samples=4), HISTORY)
    assert (fit.packlimit, fit.source) == (0.6, "config")
    fit = current_packlimit(_cfg(tmp_path, packlimit_min_samples=3), HISTORY)
    assert (fit.packlimit, fit.source, fit.samples, fit.misclassified) == (0.55, "history", 3, 0)
    fit = current_packlimit(_cfg(tmp_path, packlimit=0.6, packlimit_min_samples=3, packlimit_learning=False), HISTORY)
    assert (fit.packlimit, fit.source) == (0.6, "config")


@pytest.mark.parametrize(
    "extra, problem",
    [
        ({"packlimit_learning": "yes"}, "packlimit_learning: must be true or false"),
        ({"packlimit_min_samples": 0}, "packlimit_min_samples: must be a whole number >= 1"),
        ({"packlimit_min_samples": 2.5}, "packlimit_min_samples: must be a whole number >= 1"),
    ],
)
def test_bad_learning_keys_are_one_line_naming_the_key(tmp_path, extra, problem):
    with pytest.raises(ConfigError, match=problem):
        _cfg(tmp_path, **extra)


NODES = [SlurmNode(f"node{i}", frozenset({"MIXED"}), 4, 2, ("gpu",)) for i in (1, 2)]


def test_a_finished_spread_run_refits_packlimit_and_rebuilds_the_policy(tmp_path):
    """A 4-GPU job of model m (profiled skew 0.9) runs on 2 nodes at 2x its baseline;
    when it finishes its run is stored, and the next round fits 0.5 -> 0.55."""
    cfg = _cfg(tmp_path, packlimit_min_samples=4)
    store = StateStore(cfg.state_db)
    for row in HISTORY:
        assert store.add_run(row)
    assert not store.add_run(HISTORY[0])  # one row per run
    ProfileStore(cfg.profiles).put(model_key("m"), Profile(valid=True, skew=0.9, skew_source="traffic"))
    base = tmp_path / "jobs"
    built: list[float | None] = []

    def factory(config, dist):
        built.append(config.packlimit)
        return default_policy(config, dist)

    ctl = Controller(cfg, NoBackend(), store, AuditLog(cfg.audit_log), policy_factory=factory)
    running = replace(
        held_job(7),
        name="m",
        gpus=4,
        state="RUNNING",
        held=False,
        priority=100,
        num_nodes=2,
        nodes=("node1", "node2"),
        start_time=150.0,
        comment=format_comment({"dir": str(base)}),
    )
    r1 = ctl.round(now=200.0, slurm_jobs=[running], slurm_nodes=NODES)
    assert r1.to_json()["packlimit"] == {
        "value": 0.5,
        "source": "default",
        "samples": 3,
        "misclassified": 0,
        "reason": "not enough history: 3 spread runs (< 4)",
    }
    job_dir(base, 7).mkdir(parents=True)  # the hooks make it on the job's first step
    append_run(job_dir(base, 7), _run(7, 0, 2.0, 2))
    done = replace(running, state="COMPLETED", end_time=260.0)
    ctl.round(now=270.0, slurm_jobs=[done], slurm_nodes=NODES)
    assert [(o.job_id, o.nodes, o.min_nodes, o.skew, o.median_step_s) for o in store.runs()][-1] == (7, 2, 1, 0.9, 2.0)
    r3 = ctl.round(now=280.0, slurm_jobs=[], slurm_nodes=NODES)
    assert r3.to_json()["packlimit"] == {"value": 0.55, "source": "history", "samples": 4, "misclassified": 0}
    assert built == [None, 0.55]  # built once with the default, rebuilt once with the fit
    entries = [e for e in read_audit(tmp_path / "a.jsonl") if e["action"] == "packlimit"]
    assert [(e["reason"], e["source"], e["samples"]) for e in entries] == [("0.5 -> 0.55", "history", 4)]
    ctl.round(now=290.0, slurm_jobs=[], slurm_nodes=NODES)
    assert built == [None, 0.55]  # nothing new: no refit, no rebuild
    json.dumps(r3.to_json())


def test_a_restarted_controller_starts_from_the_stored_history(tmp_path):
    cfg = _cfg(tmp_path, packlimit_min_samples=3)
    store = StateStore(cfg.state_db)
    for row in HISTORY:
        store.add_run(row)
    store.close()
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))
    assert ctl.round(now=10.0, slurm_jobs=[], slurm_nodes=NODES).packlimit["value"] == 0.55
    assert read_audit(tmp_path / "a.jsonl") == []  # not a change: the same history as before


def test_an_old_state_file_gains_the_runs_table(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('rounds', '41')")
    db.commit()
    db.close()
    store = StateStore(tmp_path / "old.db")
    assert store.get_meta("rounds") == "41" and store.runs() == []
    assert store.add_run(HISTORY[0]) and store.runs() == [HISTORY[0]]


def test_the_fit_window_is_the_latest_runs_oldest_first(tmp_path):
    store = StateStore(tmp_path / "s.db")
    for row in reversed(HISTORY):
        store.add_run(row)
    assert store.runs() == HISTORY  # by time
    assert store.runs(latest=2) == HISTORY[2:]
