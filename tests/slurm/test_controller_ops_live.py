"""Running the controller safely, on the real local Slurm cluster (with
etc/job_submit.lua, so only the controller starts GPU jobs):

- one controller per state DB; a --standby one takes over after kill -9;
- a partition or cells node Slurm lacks stops the start (exit 2) and no
  record is touched; a job that only leaves the managed set keeps its record;
- a reset cluster reusing job ids gets fresh records, the old ones archived;
- files 0640/0750 for a configured group, and `teiresias queue` run by a
  real non-root user (useradd, runuser) shows what squeue shows that user
  under PrivateData.
"""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from slurm_plugin.controller.state import Phase, StateStore
from slurm_plugin.localcluster import LocalCluster, procs
from tests.helpers import poll
from tests.slurm.controller_support import REPO, TEIRESIAS, submit_protocol_job, submit_sleep

pytestmark = pytest.mark.slurm


def once(cluster, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TEIRESIAS, "controller", "run", "-c", str(config), "--once", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cluster.env,
        timeout=120,
    )


def variant(ctl, name: str, **changes) -> Path:
    """The controller's config with some keys changed, same state DB and audit log."""
    cfg = {**yaml.safe_load(ctl.config.read_text()), **changes}
    path = ctl.tmp / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and " INFO " not in ln]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


# ------------------------------------------------------------------ item 2


def test_a_second_controller_is_refused_and_a_standby_takes_over_after_kill9(cluster, make_controller, tmp_path):
    active = make_controller().start()
    a = submit_sleep(cluster, 2)
    cluster.wait_for(a, "RUNNING", timeout=30)
    run_start = poll("active saw it run", lambda: (r := active.rec(a)) and r.run_start, 20)

    second = once(cluster, active.config)
    assert second.returncode == 2, second.stderr
    assert f"another controller (pid {active.proc.pid})" in one_line(second)

    standby = make_controller()
    standby.log = tmp_path / "standby.log"
    standby.start("--standby")
    poll("standby waiting", lambda: f"controller pid {active.proc.pid} holds" in standby.logtext(), 30)
    b = submit_sleep(cluster, 2)
    cluster.wait_for(b, "RUNNING", timeout=30)  # the active one schedules; the standby only waits
    assert f"[job {b}] start" not in standby.logtext()

    active.kill9()
    killed = time.monotonic()
    poll("standby takes the lock", lambda: "the lock is ours" in standby.logtext(), 10, every=0.05)
    took = time.monotonic() - killed
    # Within one poll interval (1 s here); +0.5 s for two Python processes on a loaded 2-core host.
    assert took < 1.5, took

    c = submit_sleep(cluster, 2)
    cluster.wait_for(c, "RUNNING", timeout=30)  # held at submission: only the standby can have started it
    poll("standby's start", lambda: f"[job {c}] start" in standby.logtext(), 10)
    # It carried on from the state the active one left: same runs, nothing vanished or restarted.
    ra, rb = standby.rec(a), standby.rec(b)
    assert ra.phase is Phase.RUNNING and ra.run_start == run_start and ra.restart_count == 0
    assert rb.phase is Phase.RUNNING and not standby.audit(action="vanished")
    assert [e["job"] for e in standby.audit(action="start")].count(a) == 1
    assert (tmp_path / "state.db.lock").read_text().strip() == str(standby.proc.pid)
    assert standby.alive() and "Traceback" not in standby.logtext()


def test_a_standby_finishes_the_preemption_the_killed_controller_began(cluster, make_controller, tmp_path):
    """kill -9 between the signal and the requeue (as in test_controller_faults.py),
    but the successor is a standby already waiting: it carries the preemption
    through from the state and journal, requeueing the victim exactly once."""
    active = make_controller(preemption={"grace_seconds": 6}).start()
    standby = make_controller(preemption={"grace_seconds": 6})
    standby.log = tmp_path / "standby.log"
    standby.start("--standby")
    old = [submit_protocol_job(cluster, tmp_path, 4, ack=False, name=f"old{i}") for i in range(4)]
    for j in old:
        cluster.wait_for(j, "RUNNING", timeout=30)
    poll("old jobs demoted", lambda: all(active.rec(j).queue == 1 for j in old), 30)
    new = submit_sleep(cluster, 4)
    victim = poll(
        "a victim signalled",
        lambda: next((j for j, r in active.records().items() if r.phase is Phase.PREEMPTING), None),
        30,
    )
    active.kill9()
    assert cluster.job(victim).restart_count == 0, "the crash came before the requeue"

    cluster.wait_for(new, "RUNNING", timeout=60)
    after = poll("victim requeued", lambda: (r := standby.rec(victim)) and r.preemptions == 1 and r, 30)
    assert cluster.job(victim).restart_count == 1 and len(standby.audit(victim, "requeue")) == 1
    assert f"[job {new}] start" in standby.logtext() and after.closed_run_seconds >= 6.0
    assert "Traceback" not in standby.logtext()


# ------------------------------------------------------------------ items 7 and 20


def test_a_wrong_partition_is_refused_and_touches_no_record(cluster, make_controller):
    ctl = make_controller()
    a = submit_sleep(cluster, 1)
    assert once(cluster, ctl.config).returncode == 0
    cluster.wait_for(a, "RUNNING", timeout=30)
    assert once(cluster, ctl.config).returncode == 0
    before = ctl.rec(a)
    assert before.phase is Phase.RUNNING and before.run_start

    bad = once(cluster, variant(ctl, "bad.yaml", partitions=["nosuchpart"]))
    assert bad.returncode == 2 and "partitions: nosuchpart not in Slurm" in one_line(bad)
    assert ctl.rec(a) == before  # the old controller closed it as VANISHED

    # A job that merely leaves the managed set (partition `other` managed instead) is not VANISHED.
    moved = once(cluster, variant(ctl, "other.yaml", partitions=["other"]))
    assert moved.returncode == 0, moved.stderr
    assert ctl.rec(a).phase is Phase.RUNNING and ctl.rec(a).final_state is None
    assert once(cluster, ctl.config).returncode == 0
    after = ctl.rec(a)
    assert after.phase is Phase.RUNNING and after.run_start == before.run_start
    assert after.first_start_time == before.first_start_time and not ctl.audit(action="vanished")


def _cells(tmp: Path, nodes: list[str]) -> Path:
    p = tmp / f"cells-{len(nodes)}.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "cell_types": {"gpu": {}, "node": {"child": "gpu", "count": 4, "node": True}},
                "physical_cells": [{"type": "node", "nodes": [n]} for n in nodes],
                "virtual_clusters": {"vc": {"accounts": ["root"], "quota": {"node": 1}}},
            }
        )
    )
    return p


def test_cells_nodes_unknown_to_slurm_or_missing_stop_the_start(cluster, make_controller, tmp_path):
    ctl = make_controller()
    a = submit_sleep(cluster, 1)
    r = once(cluster, variant(ctl, "c1.yaml", cells=str(_cells(tmp_path, ["node1", "node9"]))))
    assert r.returncode == 2 and "unknown node node9" in one_line(r)
    r = once(cluster, variant(ctl, "c2.yaml", cells=str(_cells(tmp_path, ["node1"]))))
    assert r.returncode == 2 and "node(s) node2, node3, node4 of the managed partitions" in one_line(r)
    assert ctl.rec(a) is None and cluster.job(a).state == "PENDING"  # nothing was decided
    ok = once(cluster, variant(ctl, "c4.yaml", cells=str(_cells(tmp_path, list(cluster.nodes)))))
    assert ok.returncode == 0, ok.stderr


# ------------------------------------------------------------------ item 8


def _reset_slurm(cluster) -> None:
    """A reinstalled cluster: slurmctld restarted without its job state. It
    forgets every job and numbers jobs from FirstJobId again (with -c alone it
    keeps counting: the last id is read from job_state)."""
    lua = LocalCluster(cluster.lua_cfg)
    assert procs.stop_pid(lua.ctld_pid(), "slurmctld")
    line = next(ln for ln in cluster.conf.read_text().splitlines() if ln.startswith("StateSaveLocation="))
    state = Path(line.split("=", 1)[1])
    for p in [*state.glob("job_state*"), *state.glob("hash.*")]:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    subprocess.run(["slurmctld", "-c"], env=cluster.env, check=True, timeout=30)
    lua.up()


def test_a_reset_cluster_reusing_job_ids_gets_fresh_records(cluster, make_controller):
    ctl = make_controller()
    _reset_slurm(cluster)
    old = submit_sleep(cluster, 1)
    assert once(cluster, ctl.config).returncode == 0
    cluster.wait_for(old, "RUNNING", timeout=30)
    poll("a second of service", lambda: time.time() - cluster.job(old).start_time >= 1.5, 10)
    assert once(cluster, ctl.config).returncode == 0
    recorded = ctl.rec(old)
    assert recorded.phase is Phase.RUNNING and recorded.run_start

    # The controller is away while the cluster is reset; the new cluster reuses the id.
    cluster.backend.cancel(old)
    poll("old job gone", lambda: not cluster.active_jobs(), 30)
    _reset_slurm(cluster)
    new = submit_sleep(cluster, 1)
    assert new == old, f"the reset cluster gave id {new}, not {old}: nothing to test"

    r = once(cluster, ctl.config)
    assert r.returncode == 0, r.stderr
    rec = ctl.rec(new)
    assert rec.submit_time == cluster.job(new).submit_time != recorded.submit_time
    assert rec.first_start_time != recorded.first_start_time and rec.closed_run_seconds == 0
    assert rec.preemptions == 0 and rec.queue == 0
    replaced = ctl.audit(new, "replaced")
    assert len(replaced) == 1 and "fresh record" in replaced[0]["reason"]
    assert r.stderr.count("is not the job recorded under that id") == 1
    assert not ctl.audit(action="vanished")  # the old job is archived, not reported as a loss
    store = StateStore(ctl.tmp / "state.db", readonly_copy=True)
    try:
        (archived,) = store.archived(old)
    finally:
        store.close()
    # Kept whole: its run closed at its last sighting, its service not lost.
    assert archived.first_start_time == recorded.first_start_time and archived.final_state == "VANISHED"
    assert archived.closed_run_seconds >= 1.5 and archived.submit_time == recorded.submit_time
    cluster.wait_for(new, "RUNNING", timeout=30)  # and it is scheduled as a job of its own
    assert once(cluster, ctl.config).returncode == 0
    assert r.stderr.count("fresh record") == 1 and "fresh record" not in once(cluster, ctl.config).stderr


# ------------------------------------------------------------------ items 9 and 10, as a real user

USER, GROUP, OUTSIDER = "tsops-user", "tsops-readers", "tsops-outsider"
# The venv's interpreter lives under /root (0700): the user runs the system
# Python 3.11 on the same source tree and the venv's installed packages.
SITE = REPO / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def as_user(cluster, user: str, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURM_CONF": str(cluster.conf),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": f"{REPO}:{SITE}",
        "HOME": "/tmp",
    }
    return subprocess.run(
        ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in env.items()), *args],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )


def submit_as(cluster, user: str) -> int:
    """A 1-GPU ``sleep 600`` job in partition gpu submitted by ``user`` (sbatch as that user): its id."""
    cmd = ["sbatch", "--parsable", "-p", "gpu", "--gpus=1", "-t", "10", "-D", "/tmp", "-o", "/dev/null"]
    return int(as_user(cluster, user, *cmd, "--wrap", "sleep 600").stdout.strip())


@pytest.fixture
def real_users(cluster):
    if not shutil.which("useradd") or not Path("/usr/bin/python3").exists():
        pytest.skip("needs useradd and /usr/bin/python3")
    subprocess.run(["groupadd", "-f", GROUP], check=True)
    for u in (USER, OUTSIDER):
        if subprocess.run(["id", u], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "-M", "-s", "/bin/sh", u], check=True)
    subprocess.run(["usermod", "-a", "-G", GROUP, USER], check=True)
    yield
    # Their jobs first: userdel refuses a user with running processes.
    subprocess.run(["scancel", "-u", USER], env=cluster.env, timeout=30)
    poll(
        "the user's jobs gone",
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-u", USER], env=cluster.env, capture_output=True, text=True
            ).stdout.strip()
        ),
        30,
    )
    for u in (USER, OUTSIDER):
        subprocess.run(["userdel", u], check=True)
    subprocess.run(["groupdel", GROUP], check=True)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_files_and_queue_privacy_for_a_real_user(cluster, real_users, make_controller):
    base = Path(f"/var/tmp/tt-ops-privacy-{os.getpid()}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    conf_text = cluster.conf.read_text()
    try:
        ctl = make_controller()
        cfg = variant(
            ctl,
            "shared.yaml",
            state_db=str(base / "lib" / "state.db"),
            audit_log=str(base / "log" / "audit.jsonl"),
            file_group=GROUP,
        )
        shared = base / "teiresias.yaml"
        shutil.copy(cfg, shared)
        os.chmod(shared, 0o644)

        mine = submit_sleep(cluster, 1)
        theirs = submit_as(cluster, USER)
        old = os.umask(0)
        try:
            r = once(cluster, shared)
        finally:
            os.umask(old)
        assert r.returncode == 0, r.stderr
        gid = grp.getgrnam(GROUP).gr_gid
        for d in (base / "lib", base / "log"):
            assert _mode(d) == 0o750 and d.stat().st_gid == gid, d
        # (-wal and -shm exist only while the DB is open: test_controller_ops.py checks them)
        for f in (base / "lib" / "state.db", base / "lib" / "state.db.lock", base / "log" / "audit.jsonl"):
            assert _mode(f) == 0o640 and f.stat().st_gid == gid, f

        def queue_ids(user: str, *args: str) -> set[int]:
            q = as_user(
                cluster, user, "/usr/bin/python3", "-m", "teiresias", "queue", "-c", str(shared), "--json", *args
            )
            assert q.returncode == 0, q.stderr
            return {j["job_id"] for j in yaml.safe_load(q.stdout)}

        def squeue_ids(user: str) -> set[int]:
            out = as_user(cluster, user, "squeue", "-h", "-o", "%i").stdout.split()
            return {int(x) for x in out} & {mine, theirs}

        # Without PrivateData, squeue shows every job to everyone, and so does queue.
        assert squeue_ids(USER) == {mine, theirs} == queue_ids(USER)
        cluster.conf.write_text(conf_text + "PrivateData=jobs\n")
        subprocess.run(["scontrol", "reconfigure"], env=cluster.env, check=True, timeout=30)
        poll("PrivateData in force", lambda: squeue_ids(USER) == {theirs}, 30)
        assert queue_ids(USER) == {theirs}
        q = as_user(cluster, USER, "/usr/bin/python3", "-m", "teiresias", "queue", "-c", str(shared), "-j", str(mine))
        assert q.returncode == 2 and f"{mine}: no such managed job" in q.stderr  # exists, not shown
        assert {mine, theirs} <= {j["job_id"] for j in yaml.safe_load(once_queue_root(cluster, shared))}
        # The same while the controller runs (the DB open in WAL mode, its -shm not writable by the group).
        daemon = subprocess.Popen(
            [*TEIRESIAS, "controller", "run", "-c", str(shared)],
            cwd=REPO,
            env=cluster.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            poll("the controller has the DB open", lambda: (base / "lib" / "state.db-shm").exists(), 30)
            assert _mode(base / "lib" / "state.db-shm") == 0o640
            assert queue_ids(USER) == {theirs}
        finally:
            daemon.terminate()
            daemon.wait(15)

        # Not in the group: one line, no traceback. Nor may a user run the controller.
        out = as_user(cluster, OUTSIDER, "/usr/bin/python3", "-m", "teiresias", "queue", "-c", str(shared))
        assert out.returncode == 2 and "not readable by you" in one_line(out)
        for user in (USER, OUTSIDER):
            run = as_user(
                cluster, user, "/usr/bin/python3", "-m", "teiresias", "controller", "run", "-c", str(shared), "--once"
            )
            assert run.returncode == 2 and "Permission denied" in one_line(run)
    finally:
        cluster.conf.write_text(conf_text)
        subprocess.run(["scontrol", "reconfigure"], env=cluster.env, timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def once_queue_root(cluster, shared: Path) -> str:
    q = subprocess.run(
        [*TEIRESIAS, "queue", "-c", str(shared), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cluster.env,
        timeout=60,
    )
    assert q.returncode == 0, q.stderr
    return q.stdout
