"""The measured preemption cost reaches gittins' ``preempt_cost`` (docs/policies.md "Preemption cost").

Slurm is the in-memory double (tests/unit/slurm_double.py: fast, beside the
real-Slurm tests); the job's files are written in the hooks' own formats by
teiresias.jobfiles (the Ack and checkpoints.jsonl line of a save on USR1, the
runs.jsonl line of the resumed run), as tests/torch/ shows the real hooks write them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.history import measured_preempt_cost
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import Phase, StateStore
from teiresias.errors import ConfigError
from teiresias.jobfiles import Ack, CheckpointRecord, RunRecord, append_record, append_run, job_dir, write_ack
from tests.unit.slurm_double import InMemorySlurm

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "teiresias" / "data" / "yarn-gput1000.csv"


def controller(tmp_path: Path, slurm: InMemorySlurm, cost: object = "measured") -> Controller:
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "gittins", "queues": [10], "gittins_samples": str(SAMPLES), "preempt_cost": cost},
            "preemption": {"grace_seconds": 30, "min_run_seconds": 0},  # preempted within seconds
        }
    )
    return Controller(cfg, slurm, StateStore(cfg.state_db), AuditLog(cfg.audit_log))


def at(ctl: Controller, slurm: InMemorySlurm, now: float):
    slurm.clock = now
    return ctl.round(now=now)


def test_a_measured_preemption_becomes_the_policys_preempt_cost(tmp_path: Path) -> None:
    base = tmp_path / "jobs"
    jd = job_dir(base, 1)
    jd.mkdir(parents=True)
    slurm = InMemorySlurm({"node1": 4})
    slurm.submit(1, 4, now=100.0, comment=f"teiresias:dir={base}")
    ctl = controller(tmp_path, slurm)
    assert ctl.policy().name == "gittins" and ctl.policy().preempt_cost == 0.0  # nothing measured yet
    at(ctl, slurm, 200.0)
    slurm.schedule(200.5)
    slurm.submit(2, 4, now=205.0)
    assert [a.action for a in at(ctl, slurm, 206.0).actions] == ["signal"]
    # The hooks' answer to USR1: a 7 s save, then the Ack.
    append_record(jd, CheckpointRecord(1, 0, 40, str(jd / "ckpt"), 1000, 7.0, 213.0, "preempt"))
    write_ack(jd, Ack(1, 0, 40, str(jd / "ckpt"), 1000, 7.0, 213.0))
    assert "requeue" in [a.action for a in at(ctl, slurm, 214.0).actions]
    slurm.schedule(214.5)  # job 2 runs, then ends
    slurm.finish(2, 230.0)
    assert [a.action for a in at(ctl, slurm, 231.0).actions] == ["start"]
    assert slurm.schedule(231.5) == [1]
    at(ctl, slurm, 232.0)
    assert ctl.store.jobs()[1].phase is Phase.RUNNING and ctl.policy().preempt_cost == 0.0  # not timed yet
    # The resumed run's first timed step began 12 s after its start: 10 steps of 0.5 s by 248.5.
    append_run(jd, RunRecord(1, 1, 10, 0.5, 1, 231.5 + 12.0 + 5.0))
    append_run(jd, RunRecord(1, 1, 30, 0.5, 1, 231.5 + 12.0 + 15.0))  # later lines change nothing
    at(ctl, slurm, 250.0)
    assert ctl.policy().preempt_cost == 19.0  # 7 s checkpoint + 12 s restore
    costs = [e for e in read_audit(tmp_path / "a.jsonl") if e["action"] == "preempt-cost"]
    assert [(c["job"], c["seconds"], c["ckpt_seconds"], c["restore_seconds"]) for c in costs] == [(1, 19.0, 7.0, 12.0)]
    at(ctl, slurm, 260.0)  # measured once per run
    assert len([e for e in read_audit(tmp_path / "a.jsonl") if e["action"] == "preempt-cost"]) == 1
    assert controller(tmp_path, slurm).policy().preempt_cost == 19.0  # a restarted controller keeps it


def test_a_configured_cost_is_passed_and_nothing_is_measured(tmp_path: Path) -> None:
    ctl = controller(tmp_path, InMemorySlurm({"node1": 4}), cost=30)
    assert ctl.policy().preempt_cost == 30.0 and ctl.history.preempt_cost() is None


def test_the_cost_needs_the_save_on_our_signal_and_a_timed_step(tmp_path: Path) -> None:
    jd = tmp_path
    assert measured_preempt_cost(jd, 1, 100.0) is None
    append_record(jd, CheckpointRecord(1, 0, 5, "c", 10, 3.0, 90.0, "periodic"))  # not a preemption's save
    append_run(jd, RunRecord(1, 1, 4, 1.0, 1, 120.0))
    assert measured_preempt_cost(jd, 1, 100.0) is None
    append_record(jd, CheckpointRecord(1, 0, 6, "c", 10, 2.5, 95.0, "preempt"))
    assert measured_preempt_cost(jd, 1, 100.0) == (2.5, 16.0)


def test_preempt_cost_is_checked_in_the_config() -> None:
    with pytest.raises(ConfigError, match="policy.preempt_cost: must be seconds >= 0 or measured"):
        parse_config({"policy": {"name": "gittins", "preempt_cost": "auto"}})
    with pytest.raises(ConfigError, match="policy las has none"):
        parse_config({"policy": {"name": "las", "preempt_cost": "measured"}})
