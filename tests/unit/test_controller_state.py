"""The SQLite state store (WAL, journal) and the preemption Ack check, on real files."""

from __future__ import annotations

import os
import pwd
import sqlite3
import time

import pytest

from slurm_plugin.controller.preemption import find_ack, requeue_due
from slurm_plugin.controller.state import JobRecord, JournalStatus, Phase, StateStore
from teiresias.domain import Placement
from tests.conftest import REPO
from wrappers.protocol import Ack, format_comment, job_dir, write_ack


def test_records_round_trip_and_wal(tmp_path):
    db = tmp_path / "s.db"
    store = StateStore(db)
    r = JobRecord(
        job_id=3,
        user="bob",
        gpus=4,
        submit_time=1.5,
        phase=Phase.STARTING,
        planned=Placement.of({"node1": 2, "node2": 2}),
        preemptions=2,
        ckpt_bytes=10,
    )
    with store.transaction():
        store.save_job(r)
    store.close()
    again = StateStore(db)
    assert again.job(3) == r
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    r.phase = Phase.FINISHED
    with again.transaction():
        again.save_job(r)
    assert again.jobs() == {} and again.jobs(active_only=False)[3].phase is Phase.FINISHED


def test_a_failed_transaction_leaves_nothing(tmp_path):
    store = StateStore(tmp_path / "s.db")
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.journal_begin(1, "requeue", 0)
            store.save_job(JobRecord(job_id=1))
            raise RuntimeError("crash before commit")
    assert store.journal() == [] and store.jobs() == {}


def test_journal_rows_stay_pending_until_finished_even_across_processes(tmp_path):
    db = tmp_path / "s.db"
    store = StateStore(db)
    with store.transaction():
        e = store.journal_begin(5, "requeue", 2, reason="x")
    # Another connection (a restarted controller) sees the pending row at once.
    other = sqlite3.connect(db)
    assert other.execute("SELECT status FROM journal WHERE id=?", (e.id,)).fetchone()[0] == "pending"
    pending = StateStore(db).journal(JournalStatus.PENDING)
    assert [(p.job_id, p.action, p.restart_count, p.args) for p in pending] == [(5, "requeue", 2, {"reason": "x"})]
    with store.transaction():
        store.journal_finish(e.id)
    assert StateStore(db).journal(JournalStatus.PENDING) == []


def test_dry_run_copy_never_writes_the_file(tmp_path):
    db = tmp_path / "s.db"
    s = StateStore(db)
    with s.transaction():
        s.save_job(JobRecord(job_id=1))
    s.close()
    copy = StateStore(db, readonly_copy=True)
    with copy.transaction():
        copy.save_job(JobRecord(job_id=2))
    assert set(copy.jobs()) == {1, 2}
    assert set(StateStore(db).jobs()) == {1}


def test_ack_for_the_signalled_run_triggers_the_requeue(tmp_path):
    now = time.time()
    r = JobRecord(
        job_id=11,
        comment=format_comment({"dir": str(tmp_path)}),
        phase=Phase.PREEMPTING,
        signal_time=now,
        signal_restart=1,
        restart_count=1,
    )
    assert find_ack(r) is None and requeue_due(r, now + 1, 30) is None
    # An Ack of an earlier run does not count.
    write_ack(job_dir(tmp_path, 11), Ack(11, 0, 5, "/c", 100, 0.5, now))
    assert find_ack(r) is None
    write_ack(job_dir(tmp_path, 11), Ack(11, 1, 9, "/c", 2048, 1.25, now + 0.5))
    due = requeue_due(r, now + 1, 30)
    assert due is not None and due.ack is not None and due.ack.bytes == 2048 and "acknowledged" in due.reason


def test_without_ack_the_grace_time_decides(tmp_path):
    r = JobRecord(job_id=12, comment="", phase=Phase.PREEMPTING, signal_time=100.0, signal_restart=0)
    assert requeue_due(r, 110.0, 30) is None
    due = requeue_due(r, 130.0, 30)
    assert due is not None and due.ack is None and "grace" in due.reason


def test_a_file_group_reaches_the_wal_and_shm_that_sqlite_makes_after_the_open():
    """A reader of file_group (teiresias queue) opens state.db-wal and -shm too. For a
    controller that is not root, SQLite makes them with the controller's own group (as
    root it copies the database's owner and group), at the first write after the open:
    every reader of the group got 'unable to open database file' (found by
    tests/site/test_site_live.py). Run as the service user, as a site runs it."""
    from tests.site_users import READERS, SERVICE, ensure_group, open_tmp, run_as, shared_python

    ensure_group(READERS, [SERVICE])
    with open_tmp() as d:
        folder = d / "state"
        folder.mkdir()
        pw = pwd.getpwnam(SERVICE)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        code = (
            "import grp, os, sys\n"
            "from slurm_plugin.controller.files import FileModes\n"
            "from slurm_plugin.controller.state import StateStore\n"
            f"s = StateStore({str(folder / 's.db')!r}, modes=FileModes({READERS!r}))\n"
            f"for side in ('s.db', 's.db-wal', 's.db-shm'):\n"
            f"    st = os.stat(os.path.join({str(folder)!r}, side))\n"
            "    print(side, grp.getgrgid(st.st_gid).gr_name, oct(st.st_mode & 0o777))\n"
        )
        r = run_as(SERVICE, [str(shared_python(d)), "-c", code], cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == [f"{side} {READERS} 0o640" for side in ("s.db", "s.db-wal", "s.db-shm")], (
        r.stdout
    )
