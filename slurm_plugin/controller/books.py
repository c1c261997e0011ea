"""The round's books: what reconcile observed and what the plan decided, kept.

- the records of jobs whose id Slurm reused are archived (``archive_reused_ids``);
- the timeline stages Slurm's own times give (``stamp_timeline``, audit.STAGES);
- promotions (Tiresias §3.2.3: t_J and delta_J restart), queue changes,
  ranks, Gittins indices and why-pending; finished and vanished jobs, with
  what history learns from them (``bookkeep``);
- the measured use of running tsbatch jobs (``refresh_usage``, controller/usage.py);
- array tasks split off their meta record (``split_arrays``).

The Controller calls these in its round's order (controller/loop.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from slurm_plugin.backends.base import SlurmBackend, SlurmJob
from slurm_plugin.backends.parse import FINISHED_STATES, base_state
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting, usage
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.constraints import waiting_reason
from slurm_plugin.controller.history import History
from slurm_plugin.controller.reconcile import Reconciled, same_job
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import JobId, Plan
from teiresias.errors import SlurmError, SlurmUnreachable

log = logging.getLogger("teiresias.controller")

# Array tasks split off their meta record per round (one scontrol call each).
SPLIT_PER_ROUND = 64


class Books:
    """Keeps the round's records, audit lines and timeline (see module doc)."""

    def __init__(
        self,
        config: ControllerConfig,
        backend: SlurmBackend,
        store: StateStore,
        audit: AuditLog,
        history: History,
        *,
        dry_run: bool,
    ) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.audit = audit
        self.history = history
        self.dry_run = dry_run
        self._usage_read: dict[int, float] = {}  # job -> when its usage files were last read
        self._started_stamped: set[tuple[int, int]] = set()  # (job, run) whose "started" stage is written

    def stamp_timeline(self, rec: Reconciled) -> None:
        """The timeline stages Slurm's own times give (audit.STAGES): submitted, started, finished."""
        for job_id in rec.created:
            self.audit.stage(job_id, "submitted", rec.records[job_id].submit_time, 0)
        for job_id, seg in rec.segments:  # runs that began and ended between two rounds
            if (job_id, seg.restart_count) not in self._started_stamped:
                self._started_stamped.add((job_id, seg.restart_count))
                self.audit.stage(job_id, "started", seg.start, seg.restart_count)
        for job_id, r in rec.records.items():
            if (
                r.run_start is not None
                and r.run_restart is not None
                and (job_id, r.run_restart) not in self._started_stamped
            ):
                self._started_stamped.add((job_id, r.run_restart))
                self.audit.stage(job_id, "started", r.run_start, r.run_restart)
        for job_id in rec.finished:
            r = rec.records[job_id]
            sj = rec.slurm.get(job_id)
            if (job_id, r.restart_count) not in self._started_stamped and sj is not None and sj.start_time:
                # A run that began and ended between two rounds, never seen running.
                self.audit.stage(job_id, "started", sj.start_time, r.restart_count)
            self._started_stamped = {k for k in self._started_stamped if k[0] != job_id}
            if r.end_time is not None:
                self.audit.stage(job_id, "finished", r.end_time, r.restart_count, state=r.final_state)

    def reopen_requeued(self, records: dict[int, JobRecord], managed: Mapping[int, SlurmJob], now: float) -> None:
        """A job whose record was closed and that is back in Slurm's queue, the same job
        (reconcile.same_job: requeued since): an admin's `scontrol requeue` of a job that
        had ended, Slurm's own requeue of one it took for ended across a slurmctld restart.
        Its record is opened again into ``records``, its service and first start kept
        (issue 20 B1: a fresh record took it for a new job, its attained GPU-time back to
        0; the soak, seed 20, j11). A job id another job took (a reset cluster) still gets
        a fresh record (archive_reused_ids)."""
        for job_id, sj in managed.items():
            if job_id in records or base_state(sj.state) in FINISHED_STATES:
                continue
            if sj.array_tasks and sj.array_task_id is None:
                continue  # an array's meta record: no job of its own
            old = self.store.job(job_id)
            if old is None or old.active or (old.cluster and old.cluster != self.store.cluster):
                continue
            if not same_job(old, sj) or sj.restart_count <= old.restart_count:
                continue
            why = f"requeued after its record was closed ({old.final_state}): the same job, its record opened again"
            old.phase, old.phase_since = Phase.PENDING, now
            old.final_state, old.end_time = None, None
            records[job_id] = old
            log.warning("[job %d] %s", job_id, why)
            self.audit.write(job_id, "reopened", why)

    def archive_reused_ids(self, rec: Reconciled) -> None:
        """A job id seen before belongs to another job now (new or reset cluster):
        the old record is closed and archived whole, the new job gets a fresh one."""
        for job_id in [*rec.replaced, *(j for j in rec.created if j not in rec.replaced)]:
            old = rec.replaced.get(job_id)
            if self.dry_run:
                continue
            if old is None:
                # Not among this cluster's active records: a finished one, or another cluster's.
                old = self.store.job(job_id)
                if old is None:
                    continue
            else:
                with self.store.transaction():
                    self.store.save_job(old, force=True)
            self.store.archive_job(job_id)
            sj = rec.slurm[job_id]
            if (not old.cluster or old.cluster == self.store.cluster) and same_job(old, sj):
                # Slurm requeued a job whose record was closed (e.g. NODE_FAIL): history kept all the same.
                why = (
                    f"job {job_id} came back after its record was closed ({old.final_state}): fresh"
                    " record; the closed one is archived"
                )
            else:
                why = (
                    f"job {job_id} is not the job recorded under that id (Slurm submitted it at"
                    f" {sj.submit_time:.0f}, the record's job at {old.submit_time:.0f}"
                    f"{', cluster ' + repr(old.cluster) if old.cluster else ''}): fresh record; the old one"
                    f" ({old.final_state or old.phase.value}) is archived"
                )
            log.warning("[job %d] %s", job_id, why)
            self.audit.write(job_id, "replaced", why, old_submit_time=old.submit_time, old_cluster=old.cluster)

    def bookkeep(self, rec: Reconciled, plan: Plan, now: float) -> list[str]:
        """Persist what reconcile observed and what the plan decided about queues."""
        notes: list[str] = []
        for job_id, note in rec.notes:
            notes.append(f"job {job_id}: {note}")
            log.info("[job %d] %s", job_id, note)
        for job_id in rec.vanished:
            notes.append(f"job {job_id}: vanished from Slurm between two rounds; record closed")
            log.warning("[job %d] vanished from Slurm between two rounds; record closed", job_id)
            self.audit.write(job_id, "vanished", "Slurm no longer knows the job")
        promoted = set(plan.promote)
        rank = {j: i for i, j in enumerate(plan.order)}
        free = rec.snapshot.free_gpus() if rec.constraints else None
        for job_id, r in rec.records.items():
            if job_id in promoted:
                # Tiresias §3.2.3: t_J and delta_J restart from 0.
                r.promo_time = now
                r.promo_executed = accounting.total_executed(r, now)
                self.audit.write(job_id, "promote", "waited >= PROMOTEKNOB x executed time; back to Q1")
            jid = JobId(job_id)  # the plan's keys (the same int)
            q = plan.queues.get(jid)
            if q is not None and q != r.queue:
                # attained_gpu_seconds means all GPU-time received, as in every other record;
                # what the thresholds compared (since the last promotion) is queue_service_gpu_seconds.
                self.audit.write(
                    job_id,
                    "queue",
                    f"Q{r.queue + 1} -> Q{q + 1}",
                    attained_gpu_seconds=round(accounting.attained_gpu_seconds(r, now), 1),
                    queue_service_gpu_seconds=round(accounting.attained_service(r, now), 1),
                )
                r.queue = q
            r.rank = rank.get(jid)
            if jid in plan.index:
                r.gittins = float(plan.index[jid])
            if r.active:
                r.reason = rec.not_waiting.get(job_id) or (
                    plan.reasons.get(jid, "") if r.phase is Phase.PENDING else ""
                )
                nodes = rec.constraints.get(job_id)
                if nodes is not None and r.phase is Phase.PENDING and r.reason.startswith("waiting for"):
                    # Its -w / -x / --constraint / GPU type are why it waits: say so (issue 20 B6).
                    r.reason = waiting_reason(r.gpus, nodes, free if free is not None else {})
        for job_id in rec.finished:
            r = rec.records[job_id]
            gpu_s = accounting.attained_gpu_seconds(r, now)
            self.history.learn_finished(r, gpu_s)
            jct = (r.end_time or now) - r.submit_time
            self.audit.write(
                job_id,
                "finished",
                r.final_state or "",
                jct=round(jct, 3),
                attained_gpu_seconds=round(gpu_s, 1),
                queueing_delay=round(max(0.0, jct - accounting.total_executed(r, r.end_time or now)), 3),
            )
        # Runs that ended since the last round (finished, requeued by themselves or by Slurm).
        for job_id in dict.fromkeys([*(j for j, _ in rec.segments), *rec.finished]):
            self.history.record_runs(rec.records[job_id])
        with self.store.transaction():
            for job_id, seg in rec.segments:
                self.store.add_segment(job_id, seg.restart_count, seg.start, seg.end, seg.source)
            # Finished and vanished jobs now: their end must not wait for the enactment.
            for job_id in (*rec.finished, *rec.vanished):
                self.store.save_job(rec.records[job_id])
        return notes

    def refresh_usage(self, records: dict[int, JobRecord], now: float) -> None:
        """Measured use of running tsbatch jobs (controller/usage.py), read before
        reconcile so this round's Snapshot carries it; at most every READ_EVERY_S per job."""
        for r in records.values():
            if (
                r.phase in (Phase.RUNNING, Phase.PREEMPTING)
                and now - self._usage_read.get(r.job_id, 0.0) >= usage.READ_EVERY_S
            ):
                self._usage_read[r.job_id] = now
                usage.set_usage(r, usage.read_for(r))
        self._usage_read = {j: t for j, t in self._usage_read.items() if j in records}

    def hand_back(self, jobs: dict[int, tuple[str, str]]) -> None:
        """Release to Slurm the jobs the controller holds but no longer manages
        (reconcile.handed_back): mark cleared first, then released; one log and
        audit line (``unmanaged``) each. Idempotent: a failure is retried next round."""
        if self.dry_run:
            return
        for job_id, (target, why) in jobs.items():
            try:
                self.backend.set_hold_mark(target, False)
                self.backend.release(target)
            except SlurmUnreachable:
                raise
            except SlurmError as exc:
                log.warning("[job %d] not released to Slurm: %s; tried again next round", job_id, exc)
                continue
            log.warning("[job %d] %s", job_id, why)
            self.audit.write(job_id, "unmanaged", why)

    def split_arrays(self, tasks: list[str], unheld: list[int]) -> None:
        """Split array tasks off their meta record (marking each as held by us), so
        each task is a job of its own: held, ranked, started and preempted alone.
        A meta record found without a hold (no job_submit.lua) is held whole first."""
        if self.dry_run or not tasks:
            return
        for array in unheld:
            try:
                self.backend.hold(array)  # the plain id: every task not split off yet
            except SlurmUnreachable:
                raise
            except SlurmError as exc:
                log.warning("[job %d] array pending without a hold, not held: %s", array, exc)
        for spec in tasks[:SPLIT_PER_ROUND]:
            try:
                self.backend.set_hold_mark(spec, True)
            except SlurmUnreachable:
                raise
            except SlurmError as exc:
                log.warning("[job %s] array task not split off: %s; tried again next round", spec, exc)
                continue
            log.info("[job %s] array task split off its array; held for the controller", spec)
            self.audit.write(None, "array-split", spec)
