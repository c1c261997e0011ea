"""Attained service from Slurm's own times: exact across requeues and controller downtime."""

from __future__ import annotations

import pytest

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.controller import accounting
from slurm_plugin.controller.state import JobRecord


def sj(
    state: str = "RUNNING", restart: int = 0, start: float | None = 100.0, end: float | None = None, **kw
) -> SlurmJob:
    base = dict(
        job_id=7,
        name="j",
        user="u",
        account="a",
        partition="gpu",
        state=state,
        state_reason="None",
        priority=1,
        restart_count=restart,
        requeue=True,
        held=False,
        gpus=2,
        num_nodes=1,
        nodes=("node1",),
        required_nodes=(),
        submit_time=50.0,
        eligible_time=50.0,
        start_time=start,
        end_time=end,
        time_limit_minutes=None,
        command="x",
        comment="",
    )
    base.update(kw)
    return SlurmJob(**base)


def rec() -> JobRecord:
    return JobRecord(job_id=7, gpus=2, submit_time=50.0)


def test_open_run_is_measured_from_slurm_start_time_not_first_sight():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), now=160.0, running=True)  # first seen 60 s late
    assert accounting.total_executed(r, 160.0) == pytest.approx(60.0)
    assert accounting.attained_gpu_seconds(r, 170.0) == pytest.approx(140.0)
    assert r.first_start_time == 100.0


def test_requeue_closes_the_run_and_the_next_run_adds_to_it():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 110.0, True)
    segs, _ = accounting.observe_run(r, sj("COMPLETED", restart=0, start=100.0, end=130.0), 135.0, False)
    assert [(s.start, s.end, s.source) for s in segs] == [(100.0, 130.0, "slurm")]
    assert accounting.total_executed(r, 200.0) == pytest.approx(30.0)
    accounting.observe_run(r, sj(restart=1, start=200.0), 210.0, True)
    assert accounting.total_executed(r, 250.0) == pytest.approx(80.0)


def test_a_run_seen_while_the_controller_was_away_is_closed_at_an_estimated_end():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 120.0, True)
    # Controller away; the job requeued itself and runs again (restart 1) from t=400.
    segs, notes = accounting.observe_run(r, sj(restart=1, start=400.0, time_limit_minutes=1), 410.0, True)
    assert segs[0].end == pytest.approx(160.0)  # capped by the 1-minute time limit
    assert notes and "estimated" in notes[0]
    assert r.run_start == 400.0 and r.run_restart == 1


def test_a_requeued_job_end_time_in_the_future_is_not_taken_as_its_run_end():
    """Observed on Slurm 22.05: after a requeue, StartTime/EndTime describe the next run (now + 120 s)."""
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 110.0, True)
    segs, _ = accounting.observe_run(r, sj("PENDING", restart=1, start=250.0, end=550.0), 131.0, False)
    assert [(s.end, s.source) for s in segs] == [(110.0, "estimated")]  # last seen running


def test_a_whole_run_missed_is_noted_once_and_not_counted():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 110.0, True)
    accounting.observe_run(r, sj("PENDING", restart=1, start=0, end=0), 120.0, False)
    _, notes = accounting.observe_run(r, sj("PENDING", restart=3, start=0, end=0), 300.0, False)
    assert notes and "not counted" in notes[0]
    _, notes = accounting.observe_run(r, sj("PENDING", restart=3, start=0, end=0), 310.0, False)
    assert notes == [] and accounting.total_executed(r, 400.0) == pytest.approx(10.0)


def test_executed_and_waiting_time_restart_at_a_promotion():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 110.0, True)
    accounting.observe_run(r, sj("PENDING", restart=1, end=150.0), 160.0, False)
    now = 250.0
    assert accounting.executed_time(r, now) == pytest.approx(50.0)
    assert accounting.waiting_time(r, now) == pytest.approx((250 - 50) - 50)
    r.promo_time, r.promo_executed = now, accounting.total_executed(r, now)
    assert accounting.executed_time(r, now) == 0.0 and accounting.waiting_time(r, now) == 0.0
    assert accounting.waiting_time(r, now + 30) == pytest.approx(30.0)
    assert accounting.total_executed(r, now + 30) == pytest.approx(50.0)  # never reset


def test_a_closed_run_is_not_reopened_while_slurm_still_shows_it_running():
    r = rec()
    accounting.observe_run(r, sj(start=100.0), 110.0, True)
    accounting.close_run(r, 120.0, "controller")  # we requeued it
    accounting.observe_run(r, sj(start=100.0), 121.0, True)  # Slurm has not caught up
    assert r.run_start is None and accounting.total_executed(r, 200.0) == pytest.approx(20.0)


def test_a_run_that_began_and_ended_between_two_rounds_is_counted_from_slurms_times():
    """Issue 20 B3: a job started and ended between two rounds (`controller run --once`,
    a 1-s job under load) was recorded with no service and no first start."""
    r = rec()
    segs, _ = accounting.observe_run(r, sj("COMPLETED", start=100.0, end=104.0), 130.0, False)
    assert [(s.start, s.end, s.source) for s in segs] == [(100.0, 104.0, "slurm")]
    assert r.first_start_time == 100.0 and accounting.attained_gpu_seconds(r, 130.0) == pytest.approx(8.0)
    # Seen again (the round after): not counted twice.
    assert accounting.observe_run(r, sj("COMPLETED", start=100.0, end=104.0), 140.0, False)[0] == []
    # After a run of its own was closed at a requeue, the next (unseen) one adds to it.
    r2 = rec()
    accounting.observe_run(r2, sj(start=100.0), 110.0, True)
    accounting.close_run(r2, 120.0, "controller")
    segs, _ = accounting.observe_run(r2, sj("FAILED", restart=1, start=200.0, end=203.0), 230.0, False)
    assert [(s.restart_count, s.seconds) for s in segs] == [(1, 3.0)]
    assert accounting.total_executed(r2, 230.0) == pytest.approx(23.0) and r2.first_start_time == 100.0
