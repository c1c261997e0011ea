"""Plan -> Slurm actions, each announced in the journal before it is enacted.

Every action follows the same three steps:

1. one transaction: a ``pending`` journal row (+ the record's new phase where
   a crash must not forget it, e.g. PREEMPTING once a signal may have left);
2. the backend calls;
3. one transaction: the record's bookkeeping + the journal row marked done.

A crash between 1 and 3 leaves the row pending; :meth:`Enactor.recover`
finishes it on the next start, looking at Slurm first so that nothing is done
twice (a requeue is redone only if the job still runs the very run we meant
to requeue: same restart count, still RUNNING).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_plugin.backends.base import HOLD_MARK, JobTarget, SlurmBackend, SlurmJob, requeue_settle_wait
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting, gpus
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.preemption import RequeueDue
from slurm_plugin.controller.reconcile import RUNNING_STATES, base_state, same_job
from slurm_plugin.controller.state import JobRecord, JournalEntry, JournalStatus, Phase, StateStore
from teiresias.domain import Placement
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable
from teiresias.jobfiles import PREEMPT_SIGNAL

log = logging.getLogger("teiresias.controller")

# Slurm priorities of released jobs: above anything priority/basic hands out
# by itself is not needed (the node list pins them); the order still shows
# the policy's ranking in squeue.
PRIORITY_BASE = 1_000_000


@dataclass
class Action:
    job: int
    action: str  # hold | start | signal | requeue | recover-*
    reason: str
    ok: bool | None = True  # None: dry run, not enacted
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Enactor:
    def __init__(
        self, config: ControllerConfig, backend: SlurmBackend, store: StateStore, audit: AuditLog, dry_run: bool = False
    ) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.audit = audit
        self.dry_run = dry_run
        self.actions: list[Action] = []
        # job -> the id scontrol must get (an array task's "A_T"; plain "A" acts on every task)
        self.targets: dict[int, str] = {}
        # Nodes with one gres Type per GPU: a shard job is released on the GPU the plan chose.
        self.typed: frozenset[str] = frozenset()

    def _t(self, job_id: int) -> JobTarget:
        return self.targets.get(job_id, job_id)

    # ---------------------------------------------------------------- core
    def _do(
        self,
        rec: JobRecord,
        action: str,
        reason: str,
        calls: Callable[[], None],
        *,
        restart_count: int,
        before: Callable[[], None] | None = None,
        after: Callable[[], None] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> Action:
        act = Action(rec.job_id, action, reason, detail=detail or {})
        self.actions.append(act)
        if self.dry_run:
            act.ok = None
            return act
        with self.store.transaction():
            entry = self.store.journal_begin(rec.job_id, action, restart_count, **(detail or {}))
            if before:
                before()
            self.store.save_job(rec)
        try:
            calls()
        except SlurmUnreachable:
            raise  # journal row stays pending; the next round finishes it
        except JobVanished as exc:
            act.ok = False
            act.detail["error"] = str(exc)
            with self.store.transaction():
                self.store.journal_finish(entry.id, JournalStatus.FAILED)
            # The next round's reconcile closes the record and says so in one
            # warning line; a second line here would report one event twice.
            log.debug(
                "[job %d] %s: Slurm no longer knows the job (%s); record closed next round", rec.job_id, action, exc
            )
            return act
        except SlurmError as exc:
            act.ok = False
            act.detail["error"] = str(exc)
            with self.store.transaction():
                self.store.journal_finish(entry.id, JournalStatus.FAILED)
            log.warning("[job %d] %s failed: %s", rec.job_id, action, exc)
            self.audit.write(rec.job_id, action + "-failed", str(exc))
            return act
        with self.store.transaction():
            if after:
                after()
            self.store.save_job(rec)
            self.store.journal_finish(entry.id)
        self.audit.write(rec.job_id, action, reason, **(detail or {}))
        log.info("[job %d] %s: %s", rec.job_id, action, reason)
        return act

    # ------------------------------------------------------------- actions
    def hold(self, rec: JobRecord, reason: str, now: float) -> Action:
        def after() -> None:
            rec.phase, rec.phase_since = Phase.PENDING, now
            rec.planned = None

        return self._do(
            rec,
            "hold",
            reason,
            lambda: self.backend.hold(self._t(rec.job_id)),
            restart_count=rec.restart_count,
            after=after,
        )

    def _start_calls(
        self, rec: JobRecord, placement: Placement, priority: int, sj: SlurmJob, now: float, bind: tuple[int, ...] = ()
    ) -> Callable[[], None]:
        def calls() -> None:
            t = self._t(rec.job_id)
            job = sj
            if sj.restart_count or rec.first_start_time:
                # Read again: a job requeued in this same round (or under a second
                # ago) must not be made eligible inside its requeue second, or Slurm
                # fails its launch for good (REQUEUE_SETTLE_MARGIN).
                job = self.backend.job(t)
                wait = requeue_settle_wait(job, time.time())
                if wait > 0:
                    log.debug("[job %d] waiting %.2fs after its requeue before starting it", rec.job_id, wait)
                    time.sleep(wait)
            if job.eligible_time and job.eligible_time > now and (job.restart_count or rec.first_start_time):
                # Slurm's ~120 s delay after a requeue. A begin time of a job that never
                # ran is the user's (--begin): such a job is not started at all (reconcile).
                self.backend.clear_begin_time(t)
            self.backend.set_nodelist(t, placement.nodes)
            # The request kept aside in the AdminComment (job_submit.lua), given its GPU types.
            gres = gpus.shard_request(job, placement, all(n in self.typed for n in placement.nodes), bind)
            if gres is not None:
                self.backend.set_gres(t, gres)
            if job.held or job.priority == 0:
                # Unmarked first: a crash between the two leaves a held job without the
                # mark, whose interrupted start the journal finishes.
                if HOLD_MARK in job.admin_comment.split(";"):
                    self.backend.set_hold_mark(t, False, job.admin_comment)
                self.backend.release(t)
            self.backend.set_priority(t, priority)  # release recomputed it

        return calls

    def start(
        self,
        rec: JobRecord,
        placement: Placement,
        priority: int,
        sj: SlurmJob,
        reason: str,
        now: float,
        bind: tuple[int, ...] = (),
    ) -> Action:
        """Node list, the shard job's GPU types (``bind``: all the GPUs a job that joins an
        over-subscribed node may run on, controller/gpus.py), release, priority."""

        def before() -> None:
            # STARTING is saved with the journal row: a crash mid-start leaves a
            # record that the start-timeout re-holds if Slurm never starts it.
            rec.phase, rec.phase_since = Phase.STARTING, now
            rec.planned = placement
            rec.reason = ""
            rec.pinned_nodes = ",".join(placement.nodes)  # ReqNodeList from now on (constraints.py)

        detail: dict[str, Any] = {
            "nodes": list(placement.nodes),
            "gpus": [a.gpus for a in placement.allocations],
            "priority": priority,
        }
        if any(a.gpu_ids for a in placement.allocations):
            detail["gpu_ids"] = [list(a.gpu_ids) for a in placement.allocations]
        if bind:
            detail["bind"] = list(bind)  # the journal keeps it for a start a crash interrupts
        act = self._do(
            rec,
            "start",
            reason,
            self._start_calls(rec, placement, priority, sj, now, bind),
            restart_count=sj.restart_count,
            before=before,
            detail=detail,
        )
        if act.ok:
            self.audit.stage(rec.job_id, "decided", now, sj.restart_count)
            self.audit.stage(rec.job_id, "released", time.time(), sj.restart_count)
        return act

    def signal(
        self, rec: JobRecord, reason: str, now: float, *, signal: str = PREEMPT_SIGNAL, scope: str = "full"
    ) -> Action:
        """``scope``: "full" (tsbatch jobs: the batch shell and all its children),
        "batch" or "steps" (a self-requeueing job's own --signal, B: or not)."""

        def before() -> None:
            rec.phase, rec.phase_since = Phase.PREEMPTING, now
            rec.signal_time = now
            rec.signal_restart = rec.restart_count

        act = self._do(
            rec,
            "signal",
            reason,
            lambda: self.backend.signal(self._t(rec.job_id), signal, scope=scope),
            restart_count=rec.restart_count,
            before=before,
            detail={"signal": signal, **({"scope": scope} if scope != "full" else {})},
        )
        if act.ok:
            self.audit.stage(rec.job_id, "signalled", time.time(), rec.restart_count)
        return act

    def _after_requeue(self, rec: JobRecord, when: float, due: RequeueDue | None, lost: float = 0.0) -> None:
        rec.lost_gpu_seconds += lost
        seg = accounting.close_run(rec, when, "controller")
        if seg is not None:
            self.store.add_segment(rec.job_id, seg.restart_count, seg.start, seg.end, seg.source)
        rec.preemptions += 1
        rec.phase, rec.phase_since = Phase.PENDING, when
        rec.planned = None
        rec.signal_time = None
        rec.signal_restart = None
        if due is not None and due.ack is not None:
            rec.ckpt_seconds = due.ack.seconds
            rec.ckpt_bytes = due.ack.bytes

    def requeue(self, rec: JobRecord, due: RequeueDue, now: float) -> Action:
        def calls() -> None:
            self.backend.requeue(self._t(rec.job_id), hold=True)
            try:
                self.backend.clear_begin_time(self._t(rec.job_id))
            except SlurmError as exc:  # some states refuse it; done again at the next start
                log.debug("[job %d] clearing BeginTime after requeue: %s", rec.job_id, exc)

        detail: dict[str, Any] = {"acked": due.ack is not None}
        if due.ack is not None:
            detail.update(ckpt_seconds=due.ack.seconds, ckpt_bytes=due.ack.bytes, step=due.ack.step)
        # Work lost: GPUs x the time since its last checkpoint (issue 20 B12; 0 when it acked).
        lost = rec.gpus * max(now - due.lost_since, 0.0) if due.lost_since is not None else 0.0
        detail["lost_gpu_seconds"] = round(lost, 1)
        restart = rec.signal_restart if rec.signal_restart is not None else rec.restart_count
        act = self._do(
            rec,
            "requeue",
            due.reason,
            calls,
            restart_count=restart,
            after=lambda: self._after_requeue(rec, now, due, lost),
            detail=detail,
        )
        if act.ok:
            if due.ack is not None:
                self.audit.stage(rec.job_id, "acked", due.ack.time, restart)
            self.audit.stage(rec.job_id, "requeued", time.time(), restart)
        return act

    # ------------------------------------------------------------ recovery
    def recover(self, records: dict[int, JobRecord], slurm: dict[int, SlurmJob], now: float) -> list[Action]:
        """Finish the actions a crash interrupted (journal rows still pending)."""
        done: list[Action] = []
        if self.dry_run:
            return done
        for entry in self.store.journal(JournalStatus.PENDING):
            rec = records.get(entry.job_id)
            sj = slurm.get(entry.job_id)
            if rec is None or sj is None or not same_job(rec, sj):
                # (not same_job: the id belongs to another job now; the row was about the old one)
                with self.store.transaction():
                    self.store.journal_finish(entry.id, JournalStatus.FAILED)
                log.warning("[job %d] interrupted %s: job no longer known; dropped", entry.job_id, entry.action)
                continue
            done.append(self._recover_one(entry, rec, sj, now))
        return done

    def _recover_one(self, entry: JournalEntry, rec: JobRecord, sj: SlurmJob, now: float) -> Action:
        state = base_state(sj.state)
        running_same_run = state in RUNNING_STATES and sj.restart_count == entry.restart_count
        act = Action(rec.job_id, "recover-" + entry.action, "", detail={"journal": entry.id})
        calls: Callable[[], None] = lambda: None
        after: Callable[[], None] | None = None
        if entry.action == "requeue":
            if running_same_run:
                act.reason = "requeue was interrupted before Slurm did it: requeueing now"
                calls = lambda: self.backend.requeue(self._t(rec.job_id), hold=True)
            else:
                act.reason = f"requeue already happened (Slurm: {sj.state}, restart {sj.restart_count}); not repeated"
            if rec.phase is Phase.PREEMPTING:
                when = entry.time if not running_same_run else now
                after = lambda: self._after_requeue(rec, when, None)
        elif entry.action == "signal":
            # Assume the signal left: sending it twice could make a job checkpoint twice.
            # The grace time still bounds the wait.
            act.reason = "signal assumed delivered; waiting for the ack or the grace time"
        elif entry.action == "start":
            if state == "PENDING":
                act.reason = "start was interrupted: finishing node list, release, priority"
                placement = rec.planned
                if placement is not None:
                    bind = tuple(int(i) for i in entry.args.get("bind") or ())
                    calls = self._start_calls(
                        rec, placement, int(entry.args.get("priority", PRIORITY_BASE)), sj, now, bind
                    )
            else:
                act.reason = f"start already happened (Slurm: {sj.state})"
        elif entry.action == "hold":
            if state == "PENDING" and not sj.held:
                act.reason = "hold was interrupted: holding now"
                calls = lambda: self.backend.hold(self._t(rec.job_id))
            else:
                act.reason = "hold already in place or no longer needed"
        try:
            calls()
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            act.ok = False
            act.detail["error"] = str(exc)
        with self.store.transaction():
            if after is not None:
                after()
            self.store.save_job(rec)
            self.store.journal_finish(entry.id, JournalStatus.DONE if act.ok else JournalStatus.FAILED)
        self.audit.write(rec.job_id, act.action, act.reason, journal=entry.id)
        log.warning("[job %d] %s: %s", rec.job_id, act.action, act.reason)
        self.actions.append(act)
        return act


def fit_shape(
    placement: Placement,
    sj: SlurmJob,
    free: dict[str, int],
    allowed: list[str],
    required: frozenset[str] = frozenset(),
) -> Placement | None:
    """The plan's placement in the job's own shape, or None when the free GPUs
    cannot give it now. A job that asked per node (--gpus-per-node, --gres)
    gets exactly its node count with that many GPUs on each: the node list the
    controller sets also sets the node count, and so the job's size. Its
    ``required`` nodes (-w) come first, then the plan's, then the other
    ``allowed`` nodes (those its -x / --constraint leave), fullest free first.
    Other jobs keep the plan's placement."""
    per, count = sj.gpus_per_node, sj.num_nodes
    if not per or (
        len(placement.allocations) == count
        and all(a.gpus == per for a in placement.allocations)
        and required <= set(placement.nodes)
    ):
        return placement
    ok = set(allowed) | required
    others = sorted((n for n in allowed if n not in placement.nodes), key=lambda n: (-free.get(n, 0), n))
    order = dict.fromkeys([*sorted(required), *(n for n in placement.nodes if n in ok), *others])
    chosen = [n for n in order if free.get(n, 0) >= per][:count]
    if len(chosen) < count or not required <= set(chosen):
        return None
    return Placement.of([(n, per) for n in chosen])


def priority_for(rank: int, total: int) -> int:
    """Slurm priority of the job ranked ``rank`` (0 = first) in the policy's order."""
    return PRIORITY_BASE + max(total - rank, 1)
