"""The simulator's Job: time-dependent fields computed when read.

``queue_index`` likewise comes from the last Plan's ``queues`` (one shared
mapping) instead of being copied into every job after every round.

A policy reads ``executed_time`` (t_J), ``waiting_time`` (delta_J) and
``total_executed_time`` of every job every round. Updating them for every
job at every event costs the engine O(jobs) per event even for policies that
never read them (fifo); instead each field is kept as "value at the last
settle + time since", so a read costs one subtraction and an event costs
nothing for jobs it does not touch.

``settle()`` folds the time since the last settle into the stored values; the
engine calls it before every transition (start, preemption, promotion,
completion), so between two transitions a job's rate of progress is constant.
To the policy a SimJob is a plain :class:`teiresias.domain.Job`.
"""

from __future__ import annotations

from collections.abc import Mapping

from teiresias.domain import Job, JobId, JobState
from teiresias.simulator.trace import TraceJob

_RUNNING = JobState.RUNNING


class SimTime:
    """What all of an engine's jobs share: its current time, and the queue
    index of every job after the last round (the last Plan's ``queues``)."""

    __slots__ = ("now", "queues")

    def __init__(self, now: float) -> None:
        self.now = now
        self.queues: Mapping[JobId, int] = {}


class SimJob(Job):
    """A Job whose counters follow the engine's time.

    Engine bookkeeping (never meaningful to a policy): ``work_left`` in
    consolidated seconds, ``restore_left`` seconds of preemption overhead still
    to pay in this run, ``rate`` of progress in this placement (1/slowdown),
    ``version`` (bumped on preemption so stale completion events are skipped),
    ``held_time`` wall seconds holding GPUs, ``overhead`` charged so far.
    """

    __slots__ = (
        "_t",
        "_since",
        "_exec",
        "_wait",
        "_total",
        "_q",
        "trace",
        "work_left",
        "restore_left",
        "rate",
        "version",
        "needs_restore",
        "held_time",
        "overhead",
        "slowed",
        "nodes",
        "work_at_start",
        "feedback_work",
        "feedback_at",
    )

    def __init__(self, trace: TraceJob, t: SimTime, skew: float | None) -> None:
        # Bookkeeping first: Job.__init__ assigns through the properties below.
        self._t = t
        self._since = t.now
        self._exec = 0.0
        self._wait = 0.0
        self._total = 0.0
        self._q = 0
        self.trace = trace
        self.work_left = trace.duration
        self.restore_left = 0.0
        self.rate = 1.0
        self.version = 0
        self.needs_restore = False
        self.held_time = 0.0
        self.overhead = 0.0
        self.slowed = False
        self.nodes: tuple[str, ...] = ()
        self.work_at_start = trace.duration  # work_left when the current run began
        # Early feedback (Gandiva §4.1): when the job had done this much work (the engine's
        # feedback knob, or all of it if shorter); set by settle() at the crossing.
        self.feedback_work = trace.duration
        self.feedback_at: float | None = None
        Job.__init__(
            self,
            job_id=JobId(trace.job_id),
            num_gpus=trace.num_gpus,
            submit_time=trace.submit_time,
            user=trace.user,
            account=trace.account,
            app=trace.app,
            model_name=trace.model_name,
            skew=skew,
            duration=trace.duration,
            elastic=trace.elastic_range(),
            time_limit=trace.time_limit,
        )

    def settle(self) -> None:
        """Fold the time since the last settle into the stored counters."""
        now = self._t.now
        dt = now - self._since
        self._since = now
        if dt <= 0.0:
            return
        if self.state is _RUNNING and not self.suspended:
            self._exec += dt
            self.held_time += dt
            r = self.restore_left
            if r > 0.0:
                paid = r if r < dt else dt
                self.restore_left = r - paid
                dt -= paid
            if dt > 0.0:
                self.work_left -= dt * self.rate
                self._total = self.trace.duration - self.work_left
                if self.feedback_at is None and self._total >= self.feedback_work - 1e-9 and self.rate > 0.0:
                    # Progress was linear since the restore ended: the exact crossing time.
                    self.feedback_at = now - (self._total - self.feedback_work) / self.rate
        else:
            # A suspended job (Gandiva time-slicing) holds GPUs but waits like a pending one.
            self._wait += dt

    def doing_work(self) -> bool:
        """Running and past its restore, i.e. making useful progress right now."""
        return self.state is _RUNNING and not self.suspended and self._t.now - self._since > self.restore_left

    # -- the time-dependent Job fields --------------------------------------
    @property  # type: ignore[override]
    def executed_time(self) -> float:
        if self.state is _RUNNING and not self.suspended:
            return self._exec + (self._t.now - self._since)
        return self._exec

    @executed_time.setter
    def executed_time(self, value: float) -> None:
        self.settle()
        self._exec = float(value)

    @property  # type: ignore[override]
    def waiting_time(self) -> float:
        if self.state is _RUNNING and not self.suspended:
            return self._wait
        return self._wait + (self._t.now - self._since)

    @waiting_time.setter
    def waiting_time(self, value: float) -> None:
        self.settle()
        self._wait = float(value)

    @property  # type: ignore[override]
    def total_executed_time(self) -> float:
        """Useful work done, in consolidated seconds (restore time is not work)."""
        if self.state is _RUNNING and not self.suspended:
            el = self._t.now - self._since - self.restore_left
            if el > 0.0:
                return self._total + el * self.rate
        return self._total

    @total_executed_time.setter
    def total_executed_time(self, value: float) -> None:
        self.settle()
        self._total = float(value)

    @property  # type: ignore[override]
    def queue_index(self) -> int:
        """The MLFQ queue the last plan put this job in (0 before its first round)."""
        return self._t.queues.get(self.job_id, self._q)

    @queue_index.setter
    def queue_index(self, value: int) -> None:
        self._q = int(value)
