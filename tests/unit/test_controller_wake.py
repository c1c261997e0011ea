"""Between rounds the loop wakes early for what it waits on, instead of a whole poll interval:
a signalled job's Ack (a file; no Slurm event announces it), and the second from which a
just-requeued job may be started again (Slurm's requeue settle, REQUEUE_SETTLE_MARGIN).

These drive the real Controller.sleep and Starter with injected records (the Slurm side is a
test double: NoBackend); tests/slurm/test_events_live.py covers the live loop."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

from slurm_plugin.backends.base import REQUEUE_SETTLE_MARGIN, SlurmNode, requeue_settle_wait
from slurm_plugin.config import parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller, after_plan
from slurm_plugin.controller.preemption import awaited_acks
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import Cluster, Job, Snapshot
from teiresias.jobfiles import Ack, format_comment, job_dir, write_ack
from teiresias.policy.las import LasPolicy
from teiresias.policy.placement import ConsolidatePlacement
from tests.unit.round_support import NoBackend, held_job


def make(tmp_path: Path) -> Controller:
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "las", "queues": [10]},
            "poll_interval": 30,
        }
    )
    return Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))


def signalled(tmp_path: Path, job_id: int = 7) -> tuple[Controller, Path]:
    """A controller whose last round signalled tsbatch job ``job_id`` and awaits its Ack; the job's folder."""
    ctl = make(tmp_path)
    now = time.time()
    rec = JobRecord(
        job_id,
        comment=format_comment({"dir": str(tmp_path / "jobs")}),
        phase=Phase.PREEMPTING,
        phase_since=now,
        signal_time=now,
        signal_restart=0,
    )
    ctl._records = {job_id: rec}
    assert awaited_acks(ctl._records.values()) == [rec]
    jd = job_dir(tmp_path / "jobs", job_id)
    jd.mkdir(parents=True)
    return ctl, jd


def ack(jd: Path, at: float) -> None:
    """The job's answer to our signal, as the hooks write it (teiresias/jobfiles.py)."""
    write_ack(jd, Ack(int(jd.name), 0, 12, str(jd / "ckpt"), 100, 0.1, at))


def slept(ctl: Controller, seconds: float) -> float:
    t = time.monotonic()
    ctl.sleep(threading.Event(), seconds)
    return time.monotonic() - t


def test_sleep_ends_when_a_signalled_job_writes_its_ack(tmp_path):
    ctl, jd = signalled(tmp_path)

    def ack_later() -> None:
        time.sleep(0.3)
        ack(jd, time.time())

    threading.Thread(target=ack_later, daemon=True).start()
    took = slept(ctl, 20.0)
    # Woken within a watch step or two of the Ack (0.3 s), not after the 20 s asked.
    assert 0.25 <= took < 5.0, took


def test_an_ack_written_during_the_round_ends_the_sleep_once(tmp_path):
    """The Ack came while the round ran: the next round goes at once. If that round could
    not requeue the job (dry run, a Slurm error), the loop does not spin on the same Ack."""
    ctl, jd = signalled(tmp_path)
    ack(jd, time.time())
    assert slept(ctl, 20.0) < 1.0
    assert slept(ctl, 0.6) >= 0.55


def test_sleep_without_an_ack_lasts_its_time(tmp_path):
    ctl, _ = signalled(tmp_path)
    assert slept(ctl, 0.6) >= 0.55


def test_an_ack_of_an_earlier_run_does_not_wake_it(tmp_path):
    ctl, jd = signalled(tmp_path)
    ack(jd, time.time() - 3600)  # a checkpoint from before our signal
    assert slept(ctl, 0.6) >= 0.55


def test_a_start_inside_the_requeue_second_waits_and_the_loop_wakes_for_it(tmp_path):
    ctl = make(tmp_path)
    t0 = time.time()
    # Requeued by Slurm just now: its SubmitTime is the requeue second, its restart count 1.
    job = held_job(9, submit_time=float(int(t0)), restart_count=1)
    wait = requeue_settle_wait(job, t0)
    assert 0 < wait <= 1 + REQUEUE_SETTLE_MARGIN
    r = ctl.round(now=t0, slurm_jobs=[job], slurm_nodes=[SlurmNode("node1", frozenset({"IDLE"}), 4, 0, ("gpu",))])
    assert 9 in r.plan.start and not any(a.action == "start" for a in r.actions)
    assert ctl.starter.wake_in is not None and 0 < ctl.starter.wake_in <= wait
    assert "requeued a moment ago" in ctl.store.jobs()[9].reason


def test_the_loop_wakes_for_a_demotion_instead_of_a_whole_poll_interval(tmp_path):
    """las with a 10 GPU-s first queue: a 2-GPU job that has run 3 s (6 GPU-s) crosses it
    2 s later (Tiresias §3.2.3), so the next round comes then, not 30 s (the poll) later."""
    ctl = make(tmp_path)
    now = time.time()
    running = replace(held_job(1), state="RUNNING", held=False, start_time=now - 3, nodes=("node1",))
    ctl.round(now=now, slurm_jobs=[running], slurm_nodes=[SlurmNode("node1", frozenset({"MIXED"}), 4, 2, ("gpu",))])
    assert ctl.next_change is not None and abs(ctl.next_change - (now + 2)) < 1.01  # Slurm's whole seconds
    assert 0.5 < ctl.until_next_change(now) < 3.2
    # A policy that promises nothing, or a change already past, leaves the poll interval.
    ctl.next_change = None
    assert ctl.until_next_change(now) == float("inf")
    ctl.next_change = now - 1
    assert ctl.until_next_change(now) == float("inf")


def test_the_demotion_of_a_job_the_round_starts_is_predicted_from_its_start():
    """quiet_until is asked of the snapshot as the plan leaves it (loop.after_plan): a job
    the round starts runs from now, so its crossing of the 10 GPU-s queue with 2 GPUs is
    5 s away; asked of the snapshot before the plan, the waiting job predicts nothing."""
    cluster = Cluster.from_tiresias_spec(1, 1, 4)
    snap = Snapshot(1000.0, cluster, [Job(1, 2, 900.0)])
    policy = LasPolicy(ConsolidatePlacement(), thresholds=(10.0,))
    plan = policy.decide(snap)
    assert 1 in plan.start
    assert policy.quiet_until(snap) == float("inf")
    assert policy.quiet_until(after_plan(snap, plan)) == 1005.0
    assert after_plan(snap, replace(plan, start={})) is snap
