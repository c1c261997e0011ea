"""Two-phase preemption (Tiresias §4; the job files in teiresias/jobfiles.py).

RUNNING --signal USR1--> PREEMPTING --Ack for this run, or grace over--> requeue (held) --> PENDING

The job keeps its attained service: the run segment is closed at the requeue
and the next run adds to it. The Ack's checkpoint time and size are stored
per job: the preemption cost later policies can weigh.

Jobs that checkpoint and requeue themselves (submitit, PyTorch Lightning's
``SLURMEnvironment(auto_requeue=True)``, NeMo): their batch script asks Slurm
for a warning signal (``#SBATCH --signal=[B:]SIG[@N]``) and they may be
requeued. They get *their* signal, where Slurm would send it (the batch shell
with ``B:``, else the job steps), and N seconds (Slurm's 60 when no ``@N``)
to requeue themselves or exit; reconcile sees the requeue, and the job is
held for the policy. Past N s the controller requeues it held. The rule, and
why the batch script: docs/job-states.md "Jobs that checkpoint themselves".
"""

from __future__ import annotations

import logging
import math
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_plugin.backends.base import SlurmBackend, SlurmJob
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import channel
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.reconcile import Reconciled
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Plan
from teiresias.errors import SlurmError, SlurmUnreachable
from teiresias.jobfiles import Ack, read_ack, read_records

if TYPE_CHECKING:
    # enact.py imports RequeueDue from here; the Enactor is only a parameter type.
    from slurm_plugin.controller.enact import Enactor

log = logging.getLogger("teiresias.controller")

# An Ack written a little before our signal time is still ours (clock skew
# between the job's node and the controller's host).
_ACK_SLACK_S = 5.0


def speaks_protocol(rec: JobRecord) -> bool:
    """Jobs launched by tsbatch (comment ``teiresias:dir=...``) checkpoint on the signal."""
    return bool(rec.files.dir)


def find_ack(rec: JobRecord) -> Ack | None:
    """The job's Ack for the run we signalled, or None (not written yet, not a tsbatch job)."""
    if rec.signal_restart is None:
        return None
    jobdir = channel.folder(rec)
    if jobdir is None:
        return None
    ack = read_ack(jobdir)
    if ack is None or ack.job_id != rec.job_id or ack.restart_count != rec.signal_restart:
        return None
    if ack.key and rec.files.key and ack.key != rec.files.key:
        return None  # an earlier job's with the same id (issue 20 B11)
    if rec.signal_time is not None and ack.time < rec.signal_time - _ACK_SLACK_S:
        return None  # a checkpoint of this run from before our signal: not an answer to it
    return ack


# How often the loop looks for an awaited Ack between rounds. An Ack is a file the
# job writes (often within milliseconds of the signal); no Slurm event announces it,
# and until the next round the preempting job's GPUs sit unused while the job that
# needs them waits. A look is one small file read per awaited job.
ACK_WATCH_S = 0.1


def awaited_acks(records: Iterable[JobRecord]) -> list[JobRecord]:
    """The signalled tsbatch jobs still waiting for their requeue: whose Ack the loop looks for between rounds."""
    return [r for r in records if r.phase is Phase.PREEMPTING and r.signal_restart is not None and speaks_protocol(r)]


def first_acked(watched: Iterable[JobRecord]) -> JobRecord | None:
    """One of ``awaited_acks``' jobs whose Ack is written (the next round requeues it), or None."""
    return next((r for r in watched if find_ack(r) is not None), None)


# Slurm's warning time when --signal gives no @N.
DEFAULT_SIGNAL_SECONDS = 60.0
_SIGNAL_VALUE = re.compile(r"^(?:(?P<flags>[RB]+):)?(?P<sig>(?:SIG)?[A-Z0-9]+)(?:@(?P<secs>\d+))?$", re.I)


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """A job's own ``--signal``: what to send, to whom, and how long it was promised."""

    signal: str  # without "SIG": USR1, USR2, 10, ...
    scope: str  # "batch" (B:, the batch shell only) or "steps" (every job step, Slurm's default)
    seconds: float  # the time the job expects between the signal and its end
    spec: str  # as written, for messages

    def __str__(self) -> str:
        return f"--signal={self.spec}"


def signal_spec(script: str) -> SignalSpec | None:
    """The ``--signal`` of a batch script's ``#SBATCH`` header, or None.

    sbatch reads ``#SBATCH`` lines only up to the first command, and the last
    one given wins; so does this."""
    found: str | None = None
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        text = line.strip()
        if not text:
            continue
        if not text.startswith("#"):
            break
        if not text.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(text[len("#SBATCH") :], comments=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if w.startswith("--signal="):
                found = w.split("=", 1)[1]
            elif w == "--signal" and i + 1 < len(words):
                found = words[i + 1]
    if not found:
        return None
    m = _SIGNAL_VALUE.match(found.strip())
    if m is None:
        return None  # sbatch would have refused it; nothing to imitate
    sig = m["sig"].upper().removeprefix("SIG")
    return SignalSpec(
        signal=sig,
        scope="batch" if "B" in (m["flags"] or "").upper() else "steps",
        seconds=float(m["secs"]) if m["secs"] else DEFAULT_SIGNAL_SECONDS,
        spec=found.strip(),
    )


@dataclass(frozen=True, slots=True)
class RequeueDue:
    """``lost_since``: the instant from which the run's work is lost at this requeue
    (its last checkpoint, or its start for a job that cannot checkpoint); None when
    the job checkpointed for it (its Ack)."""

    ack: Ack | None
    reason: str
    lost_since: float | None = None


def last_checkpoint(rec: JobRecord) -> float | None:
    """When the signalled run of a tsbatch job last wrote a checkpoint, or None."""
    jobdir = channel.folder(rec)
    if jobdir is None or rec.run_start is None:
        return None
    times = [c.time for c in read_records(jobdir) if c.restart_count == rec.signal_restart and c.time >= rec.run_start]
    return max(times, default=None)


def requeue_due(rec: JobRecord, now: float, grace_seconds: float, own: SignalSpec | None = None) -> RequeueDue | None:
    """Whether a PREEMPTING job should be requeued now, and why. ``own``: the
    job requeues itself on that signal; it gets the time its spec promised."""
    if own is not None:
        waited = now - (rec.signal_time or now)
        if waited >= own.seconds:
            return RequeueDue(
                None, f"did not requeue itself within {own.seconds:g}s of its {own.signal}", rec.run_start
            )
        return None
    ack = find_ack(rec)
    if ack is not None:
        return RequeueDue(ack, f"checkpoint acknowledged (step {ack.step}, {ack.seconds:.1f}s, {ack.bytes} B)")
    waited = now - (rec.signal_time or now)
    if waited >= grace_seconds:
        since = last_checkpoint(rec) or rec.run_start
        return RequeueDue(None, f"no acknowledgement within the {grace_seconds:g}s grace time", since)
    return None


class Preempter:
    """The preemption steps of a round, in the order the Controller calls them:

    1. :meth:`preempt`: the plan's preemptions (a STARTING job gets its hold back;
       a tsbatch job its USR1; a self-requeueing job its own signal; a plain job
       is requeued at once, it has no checkpoint hook);
    2. :meth:`requeue_ready`: PREEMPTING jobs are requeued on their Ack or when
       their time is over.

    A requeue's GPUs count as free in the same round (``free`` is updated).
    """

    def __init__(self, config: ControllerConfig, backend: SlurmBackend, audit: AuditLog, *, dry_run: bool) -> None:
        self.config = config
        self.backend = backend
        self.audit = audit
        self.dry_run = dry_run
        self._unpreemptible: set[int] = set()  # --no-requeue jobs already reported
        # Non-tsbatch jobs: the signal their batch script asks for (they checkpoint and
        # requeue themselves on it), None when it asks for none. Read once per job.
        self._own_signals: dict[int, SignalSpec | None] = {}

    def forget(self, records: Mapping[int, JobRecord]) -> None:
        """Drop what is kept about jobs no longer among the active records."""
        self._own_signals = {j: v for j, v in self._own_signals.items() if j in records}

    def preempt(
        self,
        enactor: Enactor,
        rec: Reconciled,
        plan: Plan,
        free: dict[str, int],
        now: float,
        moving: frozenset[int] = frozenset(),
    ) -> None:
        """The plan's preemptions (Tiresias §3.2: preempted jobs keep their attained service).
        A job inside its minimum run time is not preempted, whatever the policy (the
        allocation walk never asks; other policies may), unless it is ``moving``: a
        Gandiva migration or resize, which checkpoints the job to start it elsewhere."""
        records = rec.records
        protected = {int(j.job_id): j.protected_until for j in rec.snapshot.jobs if j.protected_until is not None}
        for job_id in plan.preempt:
            r = records[job_id]
            until = protected.get(job_id)
            if until is not None and until > now and r.phase is Phase.RUNNING and job_id not in moving:
                if job_id not in self._unpreemptible:
                    self._unpreemptible.add(job_id)
                    why = (
                        "it cannot checkpoint"
                        if math.isinf(until)
                        else f"inside its minimum run time ({until - now:.0f}s left)"
                    )
                    log.info("[job %d] not preempted: %s", job_id, why)
                    self.audit.write(job_id, "preempt-skipped", why)
                continue
            if r.phase is Phase.STARTING:
                for a in r.planned.allocations if r.planned else ():
                    free[a.node] = free.get(a.node, 0) + a.gpus
                enactor.hold(r, "preempted before Slurm started it", now)
            elif r.phase is Phase.RUNNING:
                why = plan.reasons.get(job_id) or "a higher-priority job needs its GPUs"
                if not rec.slurm[job_id].requeue:
                    # Submitted with --no-requeue: Slurm refuses the requeue, so it runs to its end.
                    if job_id not in self._unpreemptible:
                        self._unpreemptible.add(job_id)
                        log.warning("[job %d] not preempted: submitted with --no-requeue", job_id)
                        self.audit.write(job_id, "preempt-skipped", "submitted with --no-requeue")
                    continue
                if speaks_protocol(r):
                    enactor.signal(r, why, now)
                elif (own := self.own_signal(r, rec.slurm[job_id])) is not None:
                    # submitit, Lightning auto_requeue, NeMo: their signal, then they
                    # checkpoint and requeue themselves (docs/job-states.md).
                    enactor.signal(r, f"{why}; it checkpoints itself on {own}", now, signal=own.signal, scope=own.scope)
                else:
                    # A plain sbatch job has no checkpoint hook: USR1 would just kill
                    # it (FAILED, not requeueable). Requeue it right away instead.
                    if not self.dry_run:  # saved with the journal row
                        r.signal_time, r.signal_restart = now, r.restart_count
                        r.phase, r.phase_since = Phase.PREEMPTING, now
                    act = enactor.requeue(
                        r,
                        RequeueDue(None, why + "; not a tsbatch job: requeued without a checkpoint", r.run_start),
                        now,
                    )
                    if act.ok:
                        freed(rec, job_id, free)

    def requeue_ready(
        self,
        enactor: Enactor,
        rec: Reconciled,
        free: dict[str, int],
        now: float,
        on_requeued: Callable[[JobRecord], None],
    ) -> None:
        """Preemptions in progress: requeue on Ack or when the grace time is over;
        ``on_requeued`` learns from the run that ended (controller/history.py)."""
        for job_id, r in rec.records.items():
            if r.phase is Phase.PREEMPTING:
                sj = rec.slurm.get(job_id)
                if sj is None or sj.restart_count != r.signal_restart:
                    continue
                due = requeue_due(
                    r, now, self.config.preemption.grace_seconds, None if speaks_protocol(r) else self.own_signal(r, sj)
                )
                if due is not None:
                    act = enactor.requeue(r, due, now)
                    if act.ok:
                        freed(rec, job_id, free)
                        on_requeued(r)

    def checkpoints(self, r: JobRecord, sj: SlurmJob) -> bool:
        """Does a preemption keep this job's work: a tsbatch job (the Ack protocol) or one
        that checkpoints itself on its own --signal (its batch script, read once)?"""
        return speaks_protocol(r) or self.own_signal(r, sj) is not None

    def own_signal(self, r: JobRecord, sj: SlurmJob) -> SignalSpec | None:
        """The signal a self-requeueing job asks for in its batch script (read
        once per job; Slurm 22.05 shows a job's --signal nowhere else)."""
        if r.job_id not in self._own_signals:
            if not sj.requeue:
                return None
            try:
                script = self.backend.batch_script(sj.target)
            except SlurmUnreachable:
                raise
            except SlurmError as exc:
                log.warning("[job %d] batch script unreadable (%s): preempted as a plain job", r.job_id, exc)
                script = ""
            self._own_signals[r.job_id] = signal_spec(script)
        return self._own_signals[r.job_id]


def freed(rec: Reconciled, job_id: int, free: dict[str, int]) -> None:
    """A requeue done: Slurm has released the run's GPUs when `scontrol requeue`
    returns (measured on 22.05: GresUsed drops at once; the node stays COMPLETING
    for KillWait), so the jobs waiting for them are released in this very round
    instead of the next; Slurm starts them once the node is done completing."""
    for j in rec.snapshot.jobs:
        if j.job_id == job_id and j.is_running and j.placement is not None:
            for a in j.placement.allocations:
                free[a.node] = free.get(a.node, 0) + a.gpus
