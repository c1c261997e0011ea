"""Running the controller safely, the fast pure/file-level half (the live half,
on the real local Slurm, is tests/slurm/test_controller_ops_live.py): the
state DB lock, validation at load and against Slurm's nodes, job identity
beyond the id, the migration of old state files, file modes, queue's -j."""

from __future__ import annotations

import grp
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.config import load_config, parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.files import FileModes
from slurm_plugin.controller.lock import ControllerLock, LockHeld
from slurm_plugin.controller.reconcile import reconcile, same_job
from slurm_plugin.controller.startup import check_against_slurm, parse_show_config, unreachable_line
from slurm_plugin.controller.state import JobRecord, Phase, RunOutcome, StateStore
from teiresias.errors import ConfigError, SlurmUnreachable
from tests.conftest import REPO

CFG = parse_config({"partitions": ["gpu"]})


def sjob(
    job_id: int, state: str = "PENDING", *, submit: float = 1000.0, restart: int = 0, partition: str = "gpu", nodes=()
) -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name=f"j{job_id}",
        user="alice",
        account="a",
        partition=partition,
        state=state,
        state_reason="JobHeldUser",
        priority=0,
        restart_count=restart,
        requeue=True,
        held=state == "PENDING",
        gpus=1,
        num_nodes=1,
        nodes=tuple(nodes),
        required_nodes=(),
        submit_time=submit,
        eligible_time=None,
        start_time=900.0 if state == "RUNNING" else None,
        end_time=None,
        time_limit_minutes=None,
        command="x",
        comment="",
    )


def node(name: str, parts=("gpu",)) -> SlurmNode:
    return SlurmNode(name, frozenset({"IDLE"}), 4, 0, tuple(parts), cpus=8, mem_mb=8192)


NODES = [node("node1"), node("node2"), node("node3"), node("node4"), node("c1", ("other",))]


# ------------------------------------------------------------------ the lock (item 2)


def test_a_second_controller_on_one_state_db_is_refused_naming_the_holder(tmp_path):
    db = tmp_path / "state.db"
    first, second = ControllerLock(db), ControllerLock(db)
    try:
        first.acquire()
        with pytest.raises(LockHeld, match=rf"another controller \(pid {os.getpid()}\).*--standby"):
            second.acquire()
        first.release()
        assert second.try_acquire()  # free again once the holder lets go
    finally:
        first.release()
        second.release()


# ------------------------------------------------------------------ load-time checks (item 9)


@pytest.mark.parametrize(
    "text, words",
    [
        ("policy: {name: lass}\n", "policy.name: must be one of"),
        ("placement: packed\n", "placement: must be one of"),
        ("slurm_conf: /nonexistent/slurm.conf\n", "slurm_conf: file /nonexistent/slurm.conf does not exist"),
        ("file_group: no-such-group-xyz\n", "file_group: no group named"),
    ],
)
def test_config_mistakes_found_at_load(tmp_path, text, words):
    cfg = tmp_path / "t.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=words):
        load_config(cfg)


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "teiresias", *args], capture_output=True, text=True, cwd=REPO, timeout=60, **kw
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"policy": {"name": "lass"}}, "policy.name"),
        ({"state_db": "/proc/no/such/dir/state.db"}, "cannot create the folder for state_db"),
        ({"audit_log": "/proc/self/nope/audit.jsonl"}, "audit_log"),
    ],
)
def test_controller_start_errors_are_one_line_exit_2_without_slurm(tmp_path, extra, words):
    """No Slurm is involved: these must fail before the first round (before: a
    traceback, or exit 3 'unreachable' after waiting for Slurm)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("# never read: the config is refused first\n")
    cfg = {
        "partitions": ["gpu"],
        "backend": "cli",
        "slurm_conf": str(conf),
        "state_db": str(tmp_path / "s" / "state.db"),
        "audit_log": str(tmp_path / "a" / "audit.jsonl"),
        **extra,
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(cfg))
    r = _cli("controller", "run", "-c", str(tmp_path / "t.yaml"), "--once")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_unreachable_line_says_it_once():
    line = unreachable_line(
        SlurmUnreachable(
            "slurmctld does not answer (Unable to contact slurm controller"
            " (connect failure)); is the cluster up and SLURM_CONF right?"
        )
    )
    assert line == (
        "slurmctld unreachable (Unable to contact slurm controller (connect failure));"
        " is Slurm up and SLURM_CONF right?"
    )


@pytest.mark.parametrize("arg", ["-5", "0", "abc", "4x"])
def test_queue_refuses_what_is_not_a_job_id(tmp_path, arg):
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"state_db": str(tmp_path / "state.db")}))
    r = _cli("queue", "-c", str(tmp_path / "t.yaml"), "-j", arg)
    assert r.returncode == 2 and "is not a job id" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_queue_names_an_unknown_job_instead_of_an_empty_table(tmp_path):
    db = tmp_path / "state.db"
    store = StateStore(db)
    with store.transaction():
        store.save_job(JobRecord(job_id=7, user="root", gpus=1, submit_time=1.0))
    store.close()
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"state_db": str(db)}))
    r = _cli("queue", "-c", str(tmp_path / "t.yaml"), "-j", "99999999", "--no-slurm")
    assert r.returncode == 2 and "99999999: no such managed job" in r.stderr, r.stderr
    ok = _cli("queue", "-c", str(tmp_path / "t.yaml"), "-j", "7", "--no-slurm", "--json")
    assert ok.returncode == 0 and [j["job_id"] for j in yaml.safe_load(ok.stdout)] == [7]


# ------------------------------------------------------------------ against Slurm's nodes (items 7, 20)


def test_unknown_partition_is_refused():
    check_against_slurm(CFG, NODES)
    with pytest.raises(ConfigError, match="partitions: nosuchpart not in Slurm .*gpu, other"):
        check_against_slurm(parse_config({"partitions": ["nosuchpart"]}), NODES)


def _cells(tmp_path: Path, nodes: list[str]) -> Path:
    p = tmp_path / "cells.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "cell_types": {"gpu": {}, "node": {"child": "gpu", "count": 4, "node": True}},
                "physical_cells": [{"type": "node", "nodes": [n]} for n in nodes],
                "virtual_clusters": {"vc": {"accounts": ["a"], "quota": {"node": 1}}},
            }
        )
    )
    return p


def test_cells_nodes_must_exist_and_cover_the_managed_partitions(tmp_path):
    check_against_slurm(parse_config({"cells": str(_cells(tmp_path, ["node1", "node2", "node3", "node4"]))}), NODES)
    with pytest.raises(ConfigError, match="unknown node node9"):
        check_against_slurm(parse_config({"cells": str(_cells(tmp_path, ["node1", "node9"]))}), NODES)
    with pytest.raises(ConfigError, match="node\\(s\\) node2, node3, node4 of the managed partitions are in no cell"):
        check_against_slurm(parse_config({"cells": str(_cells(tmp_path, ["node1"]))}), NODES)


# ------------------------------------------------------------------ VANISHED only when gone (item 7)


def _rec(job_id: int, **kw) -> JobRecord:
    return JobRecord(job_id=job_id, user="alice", gpus=1, submit_time=1000.0, slurm_submit_time=1000.0, **kw)


def test_a_job_that_leaves_the_managed_set_keeps_its_record():
    rec = _rec(5, phase=Phase.RUNNING, run_start=900.0, run_restart=0, last_running_seen=990.0)
    out = reconcile(CFG, {5: rec}, [sjob(5, "RUNNING", partition="other", nodes=("c1",))], NODES, 1000.0)
    assert out.vanished == [] and rec.phase is Phase.RUNNING and rec.final_state is None
    gone = reconcile(CFG, {5: rec}, [], NODES, 1000.0)  # Slurm forgot it: that is VANISHED
    assert gone.vanished == [5] and rec.final_state == "VANISHED"


# ------------------------------------------------------------------ identity beyond the id (item 8)


def test_same_job_survives_a_requeue_but_not_a_reused_id():
    rec = _rec(5, restart_count=0)
    assert same_job(rec, sjob(5, submit=1000.0))
    assert same_job(rec, sjob(5, submit=1300.0, restart=1))  # Slurm moves SubmitTime on requeue
    assert not same_job(rec, sjob(5, submit=1300.0, restart=0))  # a new job under the same id
    assert not same_job(_rec(5, restart_count=2), sjob(5, submit=1300.0, restart=0))


def test_a_requeue_seen_completing_is_still_the_same_job():
    """Issue 20 B1: Slurm counts the restart at the requeue but moves SubmitTime only when
    the run has finished completing; a round in between saw (old time, new count), and the
    next one took the job for a new one (`replaced`, attained service lost)."""
    rec = _rec(5, phase=Phase.RUNNING, run_start=900.0, run_restart=0, last_running_seen=990.0)
    seen = [
        sjob(5, "RUNNING", submit=1000.0, restart=0, nodes=("node1",)),
        sjob(5, "COMPLETING", submit=1000.0, restart=1, nodes=("node1",)),  # requeued, still completing
        sjob(5, "PENDING", submit=1300.0, restart=1),  # batch_requeue_fini: SubmitTime moved
        sjob(5, "RUNNING", submit=1300.0, restart=1, nodes=("node2",)),
        sjob(5, "COMPLETING", submit=1300.0, restart=2, nodes=("node2",)),
        sjob(5, "PENDING", submit=1600.0, restart=2),
    ]
    for i, sj in enumerate(seen):
        out = reconcile(CFG, {5: rec}, [sj], NODES, 1000.0 + 100 * i)
        assert out.replaced == {} and out.created == [] and out.records[5] is rec, (i, sj.state)
    assert rec.final_state is None and rec.slurm_submit_time == 1600.0 and rec.submit_restart == 2
    # A new job under the id (count 0, a later time) is still told apart, as is one first seen completing.
    assert not same_job(rec, sjob(5, submit=1900.0, restart=0))
    first = reconcile(CFG, {}, [sjob(7, "COMPLETING", submit=1000.0, restart=1)], NODES, 1000.0).records[7]
    assert same_job(first, sjob(7, submit=1300.0, restart=1))


def test_a_reused_id_starts_a_fresh_record_and_closes_the_old_one():
    old = _rec(
        5, phase=Phase.RUNNING, run_start=900.0, run_restart=0, last_running_seen=990.0, closed_run_seconds=500.0
    )
    out = reconcile(CFG, {5: old}, [sjob(5, submit=2000.0)], NODES, 2001.0)
    assert out.replaced == {5: old} and old.final_state == "VANISHED"
    new = out.records[5]
    assert new is not old and new.closed_run_seconds == 0 and new.submit_time == 2000.0
    assert 5 in out.created and out.vanished == []


def test_archiving_a_reused_id_keeps_everything_and_frees_the_id(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.use_cluster("c1")
    with store.transaction():
        store.save_job(_rec(5, closed_run_seconds=500.0, phase=Phase.FINISHED))
        store.add_segment(5, 0, 100.0, 600.0, "slurm")
        store.add_sample(5, 500.0)
        store.add_run(RunOutcome(5, 0, "m", 1, 1, 1, None, 0.5, 10, 600.0))
        store.journal_begin(5, "start", 0)
    old = store.archive_job(5)
    assert old is not None and old.closed_run_seconds == 500.0 and old.cluster == "c1"
    assert store.job(5) is None and store.segments(5) == []
    assert [a.closed_run_seconds for a in store.archived(5)] == [500.0]
    # The old job's GPU-seconds and run still teach Gittins and PACKLIMIT.
    assert store.samples() == [500.0] and store.sample_count() == 1 and len(store.runs()) == 1
    assert not store.has_run(5, 0) and [e.status.value for e in store.journal(job_id=5)] == ["failed"]
    store.close()


def test_records_of_another_cluster_are_left_alone(tmp_path):
    store = StateStore(tmp_path / "state.db")
    store.use_cluster("old")
    with store.transaction():
        store.save_job(_rec(5))
    notes = store.use_cluster("new")
    assert store.jobs() == {} and "1 active record(s) of Slurm cluster 'old' left alone" in notes[0]
    store.close()


def test_an_old_state_file_is_migrated_on_open_losing_nothing(tmp_path):
    """A state DB written before records had a cluster and Slurm's submit time."""
    db = tmp_path / "state.db"
    con = sqlite3.connect(db)
    old_cols = [c for c in JobRecord.__dataclass_fields__ if c not in ("cluster", "slurm_submit_time")]
    con.execute(
        f"CREATE TABLE jobs ({', '.join(c + (' INTEGER PRIMARY KEY' if c == 'job_id' else '') for c in old_cols)})"
    )
    con.execute(
        "INSERT INTO jobs (job_id, user, gpus, submit_time, phase, closed_run_seconds, restart_count)"
        " VALUES (20, 'bob', 2, 1000.0, 'PENDING', 321.0, 1)"
    )
    con.commit()
    con.close()
    store = StateStore(db)
    assert store.use_cluster("teiresias") == []
    (rec,) = store.jobs().values()
    assert (rec.job_id, rec.user, rec.closed_run_seconds, rec.cluster) == (20, "bob", 321.0, "teiresias")
    # Its job requeued since (SubmitTime moved, restart counted): still the same job.
    assert same_job(rec, sjob(20, submit=1500.0, restart=1))
    assert not same_job(rec, sjob(20, submit=1500.0, restart=0))
    store.close()


def test_scontrol_show_config_facts():
    site = parse_show_config(
        "ClusterName             = teiresias\nPrivateData             = jobs,usage\n"
        "SlurmUser               = slurm(64030)\n"
    )
    assert site.cluster_name == "teiresias" and site.private_jobs and site.slurm_user == "slurm"
    assert not parse_show_config("ClusterName = x\nPrivateData = none\n").private_jobs


# ------------------------------------------------------------------ file modes (item 10)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_state_and_audit_files_are_private_even_under_umask_000(tmp_path):
    old = os.umask(0)
    try:
        store = StateStore(tmp_path / "st" / "sub" / "state.db")
        with store.transaction():
            store.save_job(_rec(1))
        audit = AuditLog(tmp_path / "log" / "audit.jsonl")
        audit.write(1, "start")
        lock = ControllerLock(tmp_path / "st" / "sub" / "state.db")
    finally:
        os.umask(old)
    for d in (tmp_path / "st", tmp_path / "st" / "sub", tmp_path / "log"):
        assert _mode(d) == 0o700, d
    for f in ("state.db", "state.db-wal", "state.db-shm", "state.db.lock"):
        assert _mode(tmp_path / "st" / "sub" / f) == 0o600, f
    assert _mode(tmp_path / "log" / "audit.jsonl") == 0o600
    store.close()
    audit.close()
    lock.release()


def test_file_group_gives_a_group_read_access(tmp_path):
    group = grp.getgrgid(os.getgid() if os.getgid() != 0 else 0).gr_name
    modes = FileModes(group)
    old = os.umask(0o077)  # the group's read bit must not depend on the umask either
    try:
        store = StateStore(tmp_path / "st" / "state.db", modes=modes)
        audit = AuditLog(tmp_path / "st" / "audit.jsonl", modes)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "st") == 0o750
    assert _mode(tmp_path / "st" / "state.db") == 0o640 and _mode(tmp_path / "st" / "audit.jsonl") == 0o640
    assert (tmp_path / "st" / "state.db").stat().st_gid == grp.getgrnam(group).gr_gid
    store.close()
    audit.close()


def test_one_controller_per_slurm_cluster_lock(tmp_path):
    """Issue 20 B10: the cluster lock lives beside slurmctld's state, whatever the state DB."""
    from slurm_plugin.controller.lock import ClusterLock, LockHeld

    state = tmp_path / "ctld"
    state.mkdir()
    a = ClusterLock(str(state), "c1", tmp_path / "a.db")
    b = ClusterLock(str(state), "c1", tmp_path / "b.db")
    assert a.usable() is None and a.try_acquire()
    with pytest.raises(LockHeld, match=r"another controller \(pid \d+ on .*, state DB .*a\.db\) manages Slurm"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()
    assert "not on this host" in ClusterLock(str(tmp_path / "elsewhere"), "c1", tmp_path / "a.db").usable()
    assert parse_show_config("StateSaveLocation = /var/spool/slurmctld\n").state_save_location == "/var/spool/slurmctld"
