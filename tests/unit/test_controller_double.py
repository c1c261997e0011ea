"""The controller's round, enactment and crash recovery on the in-memory Slurm double.

Fast unit tests BESIDE the real-Slurm ones (tests/slurm/test_controller_faults.py
kills a real controller on a real cluster): the double (tests/unit/slurm_double.py)
is used because it can kill the controller at a chosen call, before or after
Slurm acted, which no real Slurm lets a test choose. Each of the four kinds of
journal row (start, hold, signal, requeue) is interrupted for real inside a
Controller round, and a new Controller on the same state DB finishes it
(Enactor._recover_one), through both of its branches where it has two.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.backends.base import SlurmBackend
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog, read_audit
from slurm_plugin.controller.enact import PRIORITY_BASE, Action
from slurm_plugin.controller.loop import Controller, RoundResult
from slurm_plugin.controller.state import JournalStatus, Phase, StateStore
from tests.unit.slurm_double import Crash, InMemorySlurm


def controller(tmp_path: Path, slurm: InMemorySlurm) -> Controller:
    """A controller process: a fresh one after each crash, on the same state DB and audit log."""
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
            # The paper's preemption at any time (the minimum run times: test_controller_minrun.py).
            "preemption": {"grace_seconds": 5, "min_run_seconds": 0, "plain_min_run_seconds": 0},
        }
    )
    return Controller(cfg, slurm, StateStore(cfg.state_db), AuditLog(cfg.audit_log))


def round_at(ctl: Controller, slurm: InMemorySlurm, now: float) -> RoundResult:
    slurm.clock = now
    return ctl.round(now=now)


def pending_rows(tmp_path: Path) -> list[str]:
    store = StateStore(tmp_path / "s.db")
    try:
        return [e.action for e in store.journal(JournalStatus.PENDING)]
    finally:
        store.close()


def recovered(result: RoundResult, action: str) -> Action:
    acts = [a for a in result.actions if a.action == "recover-" + action]
    assert len(acts) == 1, result.actions
    return acts[0]


def crashed_round(tmp_path: Path, slurm: InMemorySlurm, now: float, method: str, *, after: bool = False) -> None:
    slurm.crash_on(method, after=after)
    with pytest.raises(Crash):
        round_at(controller(tmp_path, slurm), slurm, now)


# ------------------------------------------------------------------- start
def test_a_start_interrupted_before_the_release_is_finished_by_the_next_controller(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    slurm.submit(1, 4, now=100.0)
    crashed_round(tmp_path, slurm, 200.0, "release")
    assert pending_rows(tmp_path) == ["start"]
    assert slurm.job_now(1).held and slurm.job_now(1).required_nodes == ("node1",)

    r = round_at(controller(tmp_path, slurm), slurm, 201.0)
    act = recovered(r, "start")
    assert act.ok and act.reason == "start was interrupted: finishing node list, release, priority"
    sj = slurm.job_now(1)
    assert not sj.held and sj.priority > PRIORITY_BASE and sj.required_nodes == ("node1",)
    assert pending_rows(tmp_path) == []
    assert [a.action for a in r.actions] == ["recover-start"]  # not started a second time
    assert slurm.schedule(202.0) == [1]
    round_at(controller(tmp_path, slurm), slurm, 203.0)
    assert StateStore(tmp_path / "s.db").jobs()[1].phase is Phase.RUNNING


def test_a_start_slurm_finished_before_the_crash_is_not_redone(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    slurm.submit(1, 4, now=100.0)
    crashed_round(tmp_path, slurm, 200.0, "set_priority")  # released: the last call never returned
    assert slurm.schedule(200.5) == [1]  # Slurm started it meanwhile

    calls = len(slurm.calls)
    r = round_at(controller(tmp_path, slurm), slurm, 201.0)
    act = recovered(r, "start")
    assert act.ok and act.reason == "start already happened (Slurm: RUNNING)"
    assert slurm.calls[calls:] == []  # nothing sent to Slurm again
    assert pending_rows(tmp_path) == []
    assert StateStore(tmp_path / "s.db").jobs()[1].phase is Phase.RUNNING


# -------------------------------------------------------------------- hold
def unheld_on_a_down_node(slurm: InMemorySlurm) -> None:
    """A job submitted without job_submit.lua's hold, while its only node is down
    (so the policy cannot start it in the round that holds it)."""
    slurm.down("node1")
    slurm.submit(1, 4, now=100.0, held=False)


def test_a_hold_interrupted_before_slurm_held_the_job_is_done_by_the_next_controller(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    unheld_on_a_down_node(slurm)
    crashed_round(tmp_path, slurm, 200.0, "hold")
    assert pending_rows(tmp_path) == ["hold"] and not slurm.job_now(1).held

    r = round_at(controller(tmp_path, slurm), slurm, 201.0)
    act = recovered(r, "hold")
    assert act.ok and act.reason == "hold was interrupted: holding now"
    assert slurm.job_now(1).held and slurm.job_now(1).priority == 0
    assert pending_rows(tmp_path) == []


def test_a_hold_slurm_did_before_the_crash_is_not_repeated(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    unheld_on_a_down_node(slurm)
    crashed_round(tmp_path, slurm, 200.0, "hold", after=True)
    assert pending_rows(tmp_path) == ["hold"] and slurm.job_now(1).held

    r = round_at(controller(tmp_path, slurm), slurm, 201.0)
    act = recovered(r, "hold")
    assert act.ok and act.reason == "hold already in place or no longer needed"
    assert [c for c in slurm.calls if c[0] == "hold"] == [("hold", "1")]  # once, before the crash
    assert pending_rows(tmp_path) == []


# ------------------------------------------------------- signal and requeue
def running_then_outranked(tmp_path: Path, slurm: InMemorySlurm) -> None:
    """Job 1 (a tsbatch job: it checkpoints on the signal) runs from t=200.5 on the
    only node; job 2 arrives at 205 and, in Q1 against job 1's Q2 (4 GPUs x 5.5 s
    > 10 GPU-s), is what the next round's plan starts by preempting job 1."""
    slurm.submit(1, 4, now=100.0, comment=f"teiresias:dir={tmp_path / 'jobs'}")
    round_at(controller(tmp_path, slurm), slurm, 200.0)
    assert slurm.schedule(200.5) == [1]
    slurm.submit(2, 4, now=205.0)


def test_an_interrupted_signal_is_taken_as_delivered_and_the_grace_time_still_bounds_it(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    running_then_outranked(tmp_path, slurm)
    crashed_round(tmp_path, slurm, 206.0, "signal")
    assert pending_rows(tmp_path) == ["signal"] and slurm.signals == []

    ctl = controller(tmp_path, slurm)
    r = round_at(ctl, slurm, 207.0)
    act = recovered(r, "signal")
    assert act.ok and act.reason == "signal assumed delivered; waiting for the ack or the grace time"
    assert slurm.signals == []  # never sent twice: a job could checkpoint twice
    assert ctl.store.jobs()[1].phase is Phase.PREEMPTING
    # No Ack comes: the grace time (5 s from the recorded signal time, 206) ends the wait.
    assert not [a for a in round_at(ctl, slurm, 210.0).actions if a.action == "requeue"]
    requeues = [a for a in round_at(ctl, slurm, 211.5).actions if a.action == "requeue"]
    assert requeues and requeues[0].ok and "grace time" in requeues[0].reason
    assert slurm.job_now(1).state == "PENDING" and slurm.job_now(1).restart_count == 1


def preempting(tmp_path: Path, slurm: InMemorySlurm) -> None:
    running_then_outranked(tmp_path, slurm)
    r = round_at(controller(tmp_path, slurm), slurm, 206.0)
    assert [(a.job, a.action) for a in r.actions] == [(1, "signal")]
    assert slurm.signals == [(1, "USR1", "full")]


def test_a_requeue_interrupted_before_slurm_did_it_is_done_by_the_next_controller(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    preempting(tmp_path, slurm)
    crashed_round(tmp_path, slurm, 212.0, "requeue")  # grace over: the requeue starts
    assert pending_rows(tmp_path) == ["requeue"] and slurm.job_now(1).state == "RUNNING"

    ctl = controller(tmp_path, slurm)
    r = round_at(ctl, slurm, 213.0)
    act = recovered(r, "requeue")
    assert act.ok and act.reason == "requeue was interrupted before Slurm did it: requeueing now"
    # The round goes on with what Slurm shows after the recovery: job 1 is not preempted a
    # second time (its signal would be refused), job 2 starts on the GPUs it freed.
    assert [(a.job, a.action) for a in r.actions] == [(1, "recover-requeue"), (2, "start")]
    sj = slurm.job_now(1)
    assert (sj.state, sj.held, sj.restart_count) == ("PENDING", True, 1)
    rec = ctl.store.jobs()[1]
    assert rec.phase is Phase.PENDING and rec.preemptions == 1
    assert rec.closed_run_seconds == pytest.approx(213.0 - 200.5)  # the run ended now, at the requeue
    assert pending_rows(tmp_path) == []


def test_a_requeue_slurm_did_before_the_crash_is_recorded_not_repeated(tmp_path):
    slurm = InMemorySlurm({"node1": 4})
    preempting(tmp_path, slurm)
    crashed_round(tmp_path, slurm, 212.0, "requeue", after=True)
    assert pending_rows(tmp_path) == ["requeue"] and slurm.job_now(1).restart_count == 1

    ctl = controller(tmp_path, slurm)
    r = round_at(ctl, slurm, 213.0)
    act = recovered(r, "requeue")
    assert act.ok and act.reason == "requeue already happened (Slurm: PENDING, restart 1); not repeated"
    assert [c for c in slurm.calls if c[0] == "requeue"] == [("requeue", "1")]
    rec = ctl.store.jobs()[1]
    assert rec.phase is Phase.PENDING and rec.preemptions == 1
    row = [e for e in ctl.store.journal(job_id=1) if e.action == "requeue"][0]
    assert row.status is JournalStatus.DONE
    assert rec.closed_run_seconds == pytest.approx(row.time - 200.5)  # ended when the row was written
    assert pending_rows(tmp_path) == []
    assert [e["action"] for e in read_audit(tmp_path / "a.jsonl") if e["job"] == 1].count("recover-requeue") == 1


# ------------------------------------------------------------- the interface
class WithoutOneJobQuery(InMemorySlurm):
    """A backend with only the abstract methods' reads (as the restd and pyslurm
    backends): one job is found through ``jobs()`` (SlurmBackend.job)."""

    job = SlurmBackend.job


def test_a_requeued_job_restarts_on_a_backend_without_its_own_one_job_query(tmp_path):
    slurm = WithoutOneJobQuery({"node1": 4})
    preempting(tmp_path, slurm)
    ctl = controller(tmp_path, slurm)
    assert [a.action for a in round_at(ctl, slurm, 212.0).actions] == ["requeue", "start"]  # grace over
    assert slurm.schedule(212.5) == [2]
    slurm.finish(2, 220.0)
    acts = round_at(ctl, slurm, 221.0).actions
    assert [(a.job, a.action, a.ok) for a in acts] == [(1, "start", True)]  # read again before the restart
    assert slurm.schedule(221.5) == [1] and slurm.job_now(1).restart_count == 1


# ------------------------------------------------------------------- issue 20 B5
def test_a_job_whose_start_failed_preempts_nobody_until_it_has_run(tmp_path):
    """A job Slurm refused to start preempted another job once per back-off retry. After a
    failed start it may only start on free GPUs until Slurm has started it once."""
    slurm = InMemorySlurm({"node1": 4})
    ctl = controller(tmp_path, slurm)
    slurm.submit(1, 4, now=100.0)
    round_at(ctl, slurm, 100.0)
    assert slurm.schedule(100.5) == [1]
    slurm.submit(2, 4, now=190.0)
    r = round_at(ctl, slurm, 200.0)  # job 1 is in Q2 (400 GPU-s): job 2 preempts it
    assert [(a.job, a.action) for a in r.actions] == [(1, "requeue"), (2, "start")]
    slurm.refuse(2)  # ... and Slurm cannot start job 2 where it was put
    r = round_at(ctl, slurm, 201.0)
    # Job 2 is held and backed off 60 s; job 1 goes back on the idle GPUs.
    assert [(a.job, a.action) for a in r.actions] == [(2, "hold"), (1, "start")]
    assert slurm.schedule(202.5) == [1]
    r = round_at(ctl, slurm, 270.0)  # the back-off is over: job 2 (Q1) ranks above job 1 (Q2)
    assert r.actions == [], r.actions  # ... but preempts nobody, and waits
    rec = ctl.store.job(2)
    assert "preempts nobody until Slurm has started it once" in rec.reason, rec.reason
    assert ctl.store.job(1).phase is Phase.RUNNING and ctl.store.job(1).preemptions == 1
    slurm.finish(1, 280.0)
    r = round_at(ctl, slurm, 281.0)  # free GPUs: it may try again
    assert [(a.job, a.action) for a in r.actions] == [(2, "start")]
