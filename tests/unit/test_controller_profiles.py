"""Skew from the profiler's store reaches the controller's jobs (real ProfileStore files)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from profiler.aggregate import Profile
from profiler.store import ProfileStore, model_key
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.profiles import SkewBook
from slurm_plugin.controller.state import JobRecord, StateStore
from tests.conftest import REPO
from tests.site_users import SERVICE, USERS, ensure_user, open_tmp, run_as, shared_python
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


@pytest.fixture
def open_tmp_path():
    with open_tmp() as d:
        yield d


def test_a_controller_that_is_not_root_survives_a_private_job_directory(open_tmp_path):
    """Issue 21 item 1: learning a profiled job's skew from a job directory in a
    private home raised PermissionError out of the round (is_dir() outside the try)."""
    user, svc = ensure_user(USERS[0]), ensure_user(SERVICE)
    jobs = Path(user.pw_dir) / ".teiresias" / "jobs"
    (jobs / "34" / "profile").mkdir(parents=True, exist_ok=True)
    for d in (jobs.parent, jobs, jobs / "34", jobs / "34" / "profile"):
        os.chown(d, user.pw_uid, user.pw_gid)
        os.chmod(d, 0o700)
    python = shared_python(open_tmp_path)
    store = open_tmp_path / "profiles"
    store.mkdir()
    os.chown(store, svc.pw_uid, svc.pw_gid)
    code = (
        "import logging, sys; from pathlib import Path\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "from slurm_plugin.controller.profiles import SkewBook\n"
        "from slurm_plugin.controller.state import JobRecord\n"
        f"rec = JobRecord(job_id=34, name='m', user={USERS[0]!r}, comment='teiresias:dir={jobs};profile=1')\n"
        f"print('skew', SkewBook(Path({str(store)!r})).learn(rec))\n"
    )
    r = run_as(SERVICE, [str(python), "-c", code], cwd=str(REPO))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "skew None" in r.stdout and "Permission denied" in r.stdout
