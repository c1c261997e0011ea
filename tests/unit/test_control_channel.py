"""The control channel (slurm_plugin/controller/channel.py, docs/admin.md "The
control channel") on real folders, real owners and real users: which folder
the controller trusts for a job and what it makes for one (issue 21 item 2,
issue 20 B11); the crash of item 1 is in test_controller_profiles.py. The live form, with a
real Slurm, jobs of two users and the controller as a service user, is
tests/site/test_site_live.py."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict
from pathlib import Path

import pytest

from slurm_plugin.controller import channel
from slurm_plugin.controller.preemption import find_ack
from slurm_plugin.controller.state import JobRecord
from teiresias import jobfiles
from teiresias.errors import ConfigError
from tests.site_users import USERS, ensure_user, open_tmp, run_as

KEY = "0123456789abcdef"


@pytest.fixture
def tmp_path():
    """Reachable by the test users (pytest's own is root's, 0700)."""
    with open_tmp() as d:
        yield d


@pytest.fixture
def spool(tmp_path):
    """A spool as docs/admin.md makes it (the test runs as root)."""
    root = tmp_path / "spool"
    root.mkdir(mode=0o755)
    channel.prepare(root, "c1")
    channel.use(channel.Channel(root, "c1"))
    yield root
    channel.use(channel.Channel())


def rec_of(user: str, job_id: int = 34, key: str = KEY, **kw) -> JobRecord:
    return JobRecord(
        job_id=job_id, user=user, cluster="c1", comment=jobfiles.format_comment({"dir": "/home/x", "key": key}), **kw
    )


def job_folder(spool: Path, user: str, job_id: int = 34, key: str = KEY) -> Path:
    """The folder the job's batch shell makes: umask 007 under the setgid cluster folder."""
    pw = ensure_user(user)
    path = jobfiles.spool_folder(spool, "c1", job_id, key)
    r = run_as(user, ["bash", "-c", f"umask 007 && mkdir {path}"])
    assert r.returncode == 0, r.stderr
    assert path.stat().st_uid == pw.pw_uid
    return path


def test_the_cluster_folder_lets_everyone_create_and_nobody_list_or_remove_others(spool):
    st = (spool / "c1").stat()
    assert stat.S_IMODE(st.st_mode) == channel.CLUSTER_FOLDER_MODE and st.st_uid == os.geteuid()
    a = job_folder(spool, USERS[0])
    # the folder a job makes is group rwx and carries the controller's group (setgid)
    assert stat.S_IMODE(a.stat().st_mode) == 0o2770 and a.stat().st_gid == (spool / "c1").stat().st_gid
    other = run_as(USERS[1], ["bash", "-c", f"ls {spool / 'c1'}; rmdir {a}; touch {a}/ack.json"])
    assert "Permission denied" in other.stderr and a.is_dir() and not (a / "ack.json").exists()


def test_the_controller_trusts_a_spool_folder_only_when_the_jobs_user_owns_it(spool, caplog):
    a = job_folder(spool, USERS[0])
    assert channel.folder(rec_of(USERS[0])) == a
    # made by another user (who read the key from the job's comment): never the job's channel
    assert channel.folder(rec_of(USERS[1])) is None
    assert "ignored: owned by uid" in caplog.text
    # a key that is not hex never becomes a path; a job without key or cluster has no folder
    assert channel.folder(rec_of(USERS[0], key="../../etc")) is None
    assert channel.folder(JobRecord(job_id=34, user=USERS[0], comment="teiresias:dir=/x")) is None
    link = jobfiles.spool_folder(spool, "c1", 35, KEY)
    link.symlink_to(a)
    assert channel.folder(rec_of(USERS[0], job_id=35)) is None


def test_an_ack_of_another_incarnation_is_not_this_jobs(spool):
    """Issue 20 B11: an Ack left under the same job id by an earlier job is ignored."""
    a = job_folder(spool, USERS[0])
    rec = rec_of(USERS[0], signal_restart=0, signal_time=100.0)
    ack = jobfiles.Ack(job_id=34, restart_count=0, step=3, path="", bytes=0, seconds=0.0, time=101.0, key=KEY)
    jobfiles.write_ack(a, ack)
    assert find_ack(rec) == ack
    jobfiles.write_ack(a, jobfiles.Ack(**{**asdict(ack), "key": "feedfacefeedface"}))
    assert find_ack(rec) is None


def test_what_the_controller_writes_for_a_job_goes_to_its_own_folder(spool):
    rec = rec_of(USERS[0])
    into = channel.folder_for_job(rec)
    assert into == jobfiles.spool_in_folder(spool, "c1", 34, KEY)
    assert jobfiles.owned_folder(into, os.geteuid()) and jobfiles.controller_folder(into)
    jobfiles.write_accumulate(into, jobfiles.Accumulate(2, 8))
    # the job's user reads it by name
    r = run_as(USERS[0], ["cat", str(into / jobfiles.ACCUMULATE)])
    assert r.returncode == 0 and json.loads(r.stdout)["accumulation"] == 2
    # a name someone else made first is not the controller's: nothing is written there
    forged = jobfiles.spool_in_folder(spool, "c1", 36, KEY)
    assert run_as(USERS[1], ["mkdir", str(forged)]).returncode == 0
    assert channel.folder_for_job(rec_of(USERS[0], job_id=36)) is None
    assert not jobfiles.controller_folder(forged)


def test_the_start_refuses_a_spool_it_cannot_own(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        channel.prepare(tmp_path / "missing" / "deeper", "c1")
    (tmp_path / "s" / "c1").mkdir(parents=True)
    pw = ensure_user(USERS[0])
    os.chown(tmp_path / "s" / "c1", pw.pw_uid, -1)
    with pytest.raises(ConfigError, match="owned by the controller's user"):
        channel.prepare(tmp_path / "s", "c1")


def test_without_a_spool_a_job_directory_made_for_a_job_carries_its_key(tmp_path):
    """A root controller writes accumulate.json into a job's own directory before the job
    first starts: the directory must carry the job's key, or the batch shell takes it for
    an earlier job's and sets it aside with the file (found live: tests/slurm/test_sharing_live.py).
    Another incarnation's directory under the id is set aside first."""
    channel.use(channel.Channel(None, "c1"))
    try:
        rec = JobRecord(
            job_id=7, user="root", cluster="c1", comment=jobfiles.format_comment({"dir": str(tmp_path), "key": KEY})
        )
        stale = tmp_path / "c1" / "7"
        stale.mkdir(parents=True)
        (stale / jobfiles.KEY_FILE).write_text("feedfacefeedface\n")
        (stale / "preempt-requested.0").touch()
        jd = channel.folder_for_job(rec)
        assert jd == stale and (jd / jobfiles.KEY_FILE).read_text().strip() == KEY
        assert not (jd / "preempt-requested.0").exists()
        assert [p.name for p in (tmp_path / "c1").iterdir() if p.name.startswith("7.stale.")]
        assert channel.folder_for_job(rec) == jd  # ours now: kept as it is
    finally:
        channel.use(channel.Channel())
