"""Skew from the profiler's store reaches the controller's jobs (real ProfileStore files)."""

from __future__ import annotations

from dataclasses import replace

from profiler.aggregate import Profile
from profiler.store import ProfileStore, model_key
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.profiles import SkewBook
from slurm_plugin.controller.state import JobRecord, StateStore
from tests.unit.round_support import NoBackend, held_job
from tests.unit.test_controller_loop import DRAINED
from wrappers.protocol import format_comment, job_dir


def test_a_job_of_a_profiled_model_gets_its_skew_when_first_seen(tmp_path):
    ProfileStore(tmp_path / "profiles").put(model_key("vgg16"), Profile(valid=True, skew=0.8, skew_source="traffic"))
    cfg = parse_config({"state_db": str(tmp_path / "s.db"), "placement": "profile"})
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(None))
    ctl.round(
        now=200.0,
        slurm_jobs=[replace(held_job(1), name="vgg16"), replace(held_job(2), name="mystery")],
        slurm_nodes=DRAINED,
    )
    recs = ctl.store.jobs()
    assert recs[1].skew == 0.8 and recs[2].skew is None


def test_learning_from_a_profiled_run_stores_the_result_and_never_invents_a_skew(tmp_path):
    book = SkewBook(tmp_path / "profiles")
    rec = JobRecord(job_id=9, name="resnet", comment=format_comment({"dir": str(tmp_path / "jobs"), "profile": "1"}))
    assert book.learn(rec) is None  # no profile directory: nothing to learn
    (job_dir(tmp_path / "jobs", 9) / "profile").mkdir(parents=True)
    assert book.learn(rec) is None  # a run that recorded nothing gives no skew...
    stored = ProfileStore(tmp_path / "profiles").for_job(9)
    assert stored is not None and not stored.valid  # ...but its (invalid) result is kept
    plain = JobRecord(job_id=10, comment=format_comment({"dir": str(tmp_path / "jobs"), "profile": "0"}))
    assert book.learn(plain) is None
