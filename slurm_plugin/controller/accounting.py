"""Attained service from Slurm's own times (Tiresias §3.2.2-§3.2.3).

executed time = sum of the job's completed run segments + (now - StartTime)
of the current run. Segments are closed when the controller sees a run end
(its own requeue, a job that finished, or a restart count that moved on), so
the figure stays exact across controller downtime: the open run is always
measured from Slurm's StartTime, never from when the controller noticed it.

t_J (``executed_time``) and delta_J (``waiting_time``) are measured since the
last starvation promotion, which resets both (§3.2.3). The GPU-time figures
are teiresias.domain.service's, the one definition the policies and the
simulator use too (docs/job-states.md, "Attained service").

Pure functions: the caller passes ``now`` and persists what they return.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.backends.parse import FINISHED_STATES
from slurm_plugin.controller.state import JobRecord
from teiresias.domain import service


@dataclass(frozen=True, slots=True)
class Segment:
    """One closed run: ``source`` says how its end was known."""

    restart_count: int
    start: float
    end: float
    source: str  # "controller" (we requeued it), "slurm" (Slurm's EndTime), "estimated"

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


def total_executed(rec: JobRecord, now: float) -> float:
    """Everything the job has run, in seconds (never reset)."""
    live = max(now - rec.run_start, 0.0) if rec.run_start is not None else 0.0
    return rec.closed_run_seconds + live


def executed_time(rec: JobRecord, now: float) -> float:
    """t_J: executed time since the last promotion (§3.2.3)."""
    return max(total_executed(rec, now) - rec.promo_executed, 0.0)


def waiting_time(rec: JobRecord, now: float) -> float:
    """delta_J: time spent waiting since the last promotion (or submission).

    A job is always either running or waiting, so the waiting time is the wall
    time since the reference instant minus what it executed meanwhile.
    """
    ref = rec.promo_time if rec.promo_time is not None else rec.submit_time
    return max((now - ref) - executed_time(rec, now), 0.0)


def attained_service(rec: JobRecord, now: float) -> float:
    """W_J x t_J since the last promotion: what the queue thresholds compare
    (Tiresias §3.2.2; ``teiresias.domain.service``, the audit key ``queue_service_gpu_seconds``)."""
    return service.attained_service(rec.gpus, executed_time(rec, now))


def attained_gpu_seconds(rec: JobRecord, now: float) -> float:
    """All GPU-time received (reports, Gittins samples): W_J x total executed
    (``teiresias.domain.service``, the audit key ``attained_gpu_seconds``)."""
    return service.attained_gpu_seconds(rec.gpus, total_executed(rec, now))


def close_run(rec: JobRecord, end: float, source: str) -> Segment | None:
    """Close the open run at ``end``; returns the segment to store (None if none was open)."""
    if rec.run_start is None or rec.run_restart is None:
        return None
    seg = Segment(rec.run_restart, rec.run_start, max(end, rec.run_start), source)
    rec.closed_run_seconds += seg.seconds
    rec.closed_restart = max(rec.closed_restart, rec.run_restart)
    rec.run_start = None
    rec.run_restart = None
    return seg


def _end_of_run(rec: JobRecord, sj: SlurmJob, now: float) -> tuple[float, str]:
    """Best end time for the open run of a job Slurm no longer shows running."""
    start = rec.run_start or 0.0
    if sj.end_time and start <= sj.end_time <= now:
        return float(sj.end_time), "slurm"
    return (rec.last_running_seen or now), "estimated"


def observe_run(rec: JobRecord, sj: SlurmJob, now: float, running: bool) -> tuple[list[Segment], list[str]]:
    """Bring the record's run segments in line with what Slurm shows now.

    ``running`` says whether Slurm has the job on its nodes (RUNNING or
    CONFIGURING). Returns the segments closed and notes worth one log line
    each (runs missed while the controller was down).
    """
    closed: list[Segment] = []
    notes: list[str] = []
    rc = sj.restart_count
    if running:
        start = float(sj.start_time or now)
        if rec.run_start is not None and rec.run_restart is not None and rec.run_restart < rc:
            # The run we knew ended and a later one began while we were not looking.
            end = min(start, rec.run_start + sj.time_limit_minutes * 60) if sj.time_limit_minutes else start
            end = max(end, rec.last_running_seen or rec.run_start)
            seg = close_run(rec, end, "estimated")
            if seg:
                closed.append(seg)
                notes.append(f"run {seg.restart_count} ended unseen; its end was estimated")
        if rec.run_start is None and rc > rec.closed_restart:
            missed = rc - rec.closed_restart - 1
            if missed > 0 and rec.closed_restart >= 0:
                notes.append(f"{missed} run(s) went unseen while the controller was away; not counted")
            rec.run_start = start
            rec.run_restart = rc
            if rec.first_start_time is None:
                rec.first_start_time = start
        elif rec.run_start is not None and rec.run_restart == rc:
            rec.run_start = start  # Slurm's StartTime is the reference, not when we saw it
        rec.last_running_seen = now
    else:
        if rec.run_start is not None:
            end, source = _end_of_run(rec, sj, now)
            seg = close_run(rec, end, source)
            if seg:
                closed.append(seg)
        elif (
            sj.start_time
            and sj.end_time
            and rc > rec.closed_restart
            and sj.start_time <= sj.end_time <= now
            and sj.state.split(" ")[0].split(",")[0].upper() in FINISHED_STATES
        ):
            # A run that began and ended between two rounds (a short job, a poll interval
            # longer than the job, `controller run --once`): never seen running, but an
            # ended job's StartTime and EndTime are Slurm's own (parse.parse_job keeps them
            # only then), so its service is counted like any other run's.
            rec.run_start, rec.run_restart = float(sj.start_time), rc
            if rec.first_start_time is None:
                rec.first_start_time = float(sj.start_time)
            seg = close_run(rec, float(sj.end_time), "slurm")
            if seg:
                closed.append(seg)
        elif rc - 1 > rec.closed_restart and rec.closed_restart >= 0:
            # A requeued job whose whole last run happened while we were away. Slurm
            # cannot tell us its length: a requeued job's StartTime/EndTime already
            # describe the next (future) run, so it is not counted.
            notes.append(f"{rc - 1 - rec.closed_restart} run(s) went unseen while the controller was away; not counted")
            rec.closed_restart = rc - 1
    rec.restart_count = rc
    return closed, notes
