"""Crash safety and faults of the live controller, on the real local Slurm cluster.

- kill -9 between the signal and the requeue of a preemption;
- a crash right after Slurm requeued a job but before the journal said so;
- slurmctld restarted under a running controller;
- a Slurm that does not answer at all;
- a job Slurm forgets between two rounds.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from slurm_plugin.controller.accounting import total_executed
from slurm_plugin.controller.state import JournalStatus, Phase, StateStore
from slurm_plugin.localcluster import LocalCluster, procs
from tests.helpers import poll
from tests.slurm.controller_support import (
    REPO,
    TEIRESIAS,
    submit_protocol_job,
    submit_sleep,
)

pytestmark = pytest.mark.slurm


def test_kill9_between_signal_and_requeue_loses_nothing_and_requeues_once(cluster, make_controller, tmp_path):
    ctl = make_controller(preemption={"grace_seconds": 6}).start()
    old = [submit_protocol_job(cluster, tmp_path, 4, ack=False, name=f"old{i}") for i in range(4)]
    for j in old:
        cluster.wait_for(j, "RUNNING", timeout=30)
    poll("old jobs demoted", lambda: all(ctl.rec(j).queue == 1 for j in old), 30)
    new = submit_sleep(cluster, 4)

    # The controller signals a victim; it never acks, so the requeue waits for the grace time.
    victim = poll(
        "a victim signalled",
        lambda: next((j for j, r in ctl.records().items() if r.phase is Phase.PREEMPTING), None),
        30,
    )
    ctl.kill9()
    rec = ctl.rec(victim)
    assert rec.signal_time is not None and rec.preemptions == 0
    sj = cluster.job(victim)
    assert sj.state == "RUNNING" and sj.restart_count == 0, "the crash came before the requeue"
    run_start = rec.run_start

    ctl.start()
    cluster.wait_for(new, "RUNNING", timeout=60)
    after = poll("victim requeued", lambda: (r := ctl.rec(victim)) and r.preemptions == 1 and r, 30)
    # Exactly one requeue: Slurm's restart count, the journal and the audit log agree.
    assert cluster.job(victim).restart_count == 1
    store = StateStore(tmp_path / "state.db", readonly_copy=True)
    requeues = [e for e in store.journal(job_id=victim) if e.action == "requeue"]
    assert [e.status for e in requeues] == [JournalStatus.DONE]
    assert len(ctl.audit(victim, "requeue")) == 1
    # Attained service intact: the run from its Slurm start to the requeue (>= the grace time).
    assert after.closed_run_seconds >= 6.0
    assert after.closed_run_seconds == pytest.approx(requeues[0].time - run_start, abs=2.0)
    # No job lost: all five still managed and known to Slurm.
    recs = ctl.records()
    assert all(recs[j].active for j in [*old, new])
    assert {cluster.job(j).state for j in old} <= {"RUNNING", "PENDING"}
    assert ctl.alive()


def test_a_requeue_done_by_slurm_but_not_journalled_is_not_repeated(cluster, make_controller, tmp_path):
    """The other crash window: `scontrol requeuehold` returned, the controller died
    before marking the journal row done. We cannot stop a process between those
    two lines for real, so the test writes the state it leaves behind (the pending
    row, PREEMPTING) with the real StateStore and does the requeue with real Slurm."""
    ctl = make_controller().start()
    job = submit_protocol_job(cluster, tmp_path, 2)
    cluster.wait_for(job, "RUNNING", timeout=30)
    poll("controller saw it run", lambda: (r := ctl.rec(job)) and r.run_start is not None, 20)
    ctl.stop()

    store = StateStore(tmp_path / "state.db")
    rec = store.job(job)
    now = time.time()
    rec.phase, rec.signal_time, rec.signal_restart = Phase.PREEMPTING, now, 0
    with store.transaction():
        store.save_job(rec)
        entry = store.journal_begin(job, "requeue", 0)
    cluster.backend.requeue(job, hold=True)
    store.close()
    ran_before = rec.closed_run_seconds + (now - rec.run_start)

    ctl.start()
    poll(
        "journal row finished",
        lambda: not StateStore(tmp_path / "state.db", readonly_copy=True).journal(JournalStatus.PENDING),
        30,
    )
    (rq,) = ctl.audit(job, "recover-requeue")
    assert "not repeated" in rq["reason"]
    # The controller starts it again (the cluster is free); still exactly one requeue.
    sj = cluster.wait_for(job, "RUNNING", timeout=40)
    assert sj.restart_count == 1
    r = ctl.rec(job)
    assert r.preemptions == 1
    assert r.closed_run_seconds == pytest.approx(ran_before, abs=2.0)
    assert total_executed(r, time.time()) >= r.closed_run_seconds
    requeues = [
        (e.id, e.status)
        for e in StateStore(tmp_path / "state.db", readonly_copy=True).journal(job_id=job)
        if e.action == "requeue"
    ]
    assert requeues == [(entry.id, JournalStatus.DONE)]


def test_slurmctld_restart_under_a_running_controller(cluster, make_controller):
    ctl = make_controller().start()
    a = submit_sleep(cluster, 2)
    cluster.wait_for(a, "RUNNING", timeout=30)
    poll("controller saw it run", lambda: (r := ctl.rec(a)) and r.run_start is not None, 20)

    pid = LocalCluster(cluster.lua_cfg).ctld_pid()
    assert pid is not None and procs.stop_pid(pid, "slurmctld")
    poll("controller notices", lambda: "unreachable" in ctl.logtext(), 60)
    assert ctl.alive()
    LocalCluster(cluster.lua_cfg).up()
    poll("controller carries on", lambda: "answers again" in ctl.logtext(), 60)

    b = submit_sleep(cluster, 2)
    cluster.wait_for(b, "RUNNING", timeout=30)  # started by the controller after the restart
    assert cluster.job(a).state == "RUNNING" and cluster.job(a).restart_count == 0
    poll(
        "controller sees both running",
        lambda: ctl.rec(a).phase is Phase.RUNNING and ctl.rec(b).phase is Phase.RUNNING,
        20,
    )
    assert ctl.logtext().count("unreachable") == 1, ctl.logtext()
    assert ctl.alive()


def test_unreachable_slurm_is_one_line_and_no_crash_loop(cluster, tmp_path):
    conf = tmp_path / "slurm.conf"
    text = cluster.conf.read_text()
    port = next(ln for ln in text.splitlines() if ln.startswith("SlurmctldPort="))
    # Nothing listens on port 1; a 1 s message timeout makes each failed call quick.
    conf.write_text(text.replace(port, "SlurmctldPort=1") + "MessageTimeout=1\n")
    cfg = tmp_path / "t.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "partitions": ["gpu"],
                "poll_interval": 0.5,
                "backend": "cli",
                "state_db": str(tmp_path / "s.db"),
                "audit_log": str(tmp_path / "a.jsonl"),
                "slurm_conf": str(conf),
            }
        )
    )
    once = subprocess.run(
        [*TEIRESIAS, "controller", "run", "-c", str(cfg), "--once", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert once.returncode == 3
    lines = [ln for ln in once.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "slurmctld unreachable" in lines[0], once.stderr

    log = tmp_path / "loop.log"
    proc = subprocess.Popen(
        [*TEIRESIAS, "controller", "run", "-c", str(cfg), "-v"],
        cwd=REPO,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        poll("two retries", lambda: log.read_text().count("retry in") >= 2, 120)
        assert proc.poll() is None
        text = log.read_text()
        assert text.count("slurmctld unreachable") == 1, text
        assert "Traceback" not in text
    finally:
        proc.terminate()
        proc.wait(15)


def test_a_job_that_vanishes_between_two_rounds_is_one_line_and_the_rest_carries_on(cluster, make_controller):
    """Slurm forgets a job for real: slurmctld restarted with a clean state (-c)."""
    ctl = make_controller().start()
    for n in cluster.nodes:  # GPUs taken by unmanaged jobs keep the managed one pending
        submit_sleep(cluster, 4, 600, "other", "-w", n)
    gone = submit_sleep(cluster, 2)
    poll("controller knows the job", lambda: ctl.rec(gone) is not None, 20)
    lua = LocalCluster(cluster.lua_cfg)
    assert procs.stop_pid(lua.ctld_pid(), "slurmctld")
    subprocess.run(["slurmctld", "-c"], env=cluster.env, check=True, timeout=30)  # forgets every job
    lua.up()
    poll("the vanished job's record closed", lambda: ctl.rec(gone).final_state == "VANISHED", 90)
    assert ctl.logtext().count("vanished from Slurm") == 1 and ctl.alive()
    # State kept consistent: the controller goes on scheduling new jobs.
    fresh = submit_sleep(cluster, 1)
    cluster.wait_for(fresh, "RUNNING", timeout=40)
    assert ctl.logtext().count("vanished from Slurm") == 1  # the 'other' jobs it forgot too were never ours
    assert ctl.alive() and "Traceback" not in ctl.logtext()
