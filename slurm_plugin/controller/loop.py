"""One controller round, and the loop that repeats it.

    poll Slurm -> finish interrupted actions -> reconcile -> policy.decide -> enact

The policy is the very object the simulator uses (teiresias.policy.registry);
this module only builds its Snapshot from Slurm and enacts its Plan.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from profiler.packlimit import PackLimitFit
from slurm_plugin.backends.base import SlurmBackend, SlurmJob, SlurmNode
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting, preemption, usage
from slurm_plugin.controller import leases, sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.events import EventSocket, open_events
from slurm_plugin.controller.enact import Action, Enactor, fit_shape, priority_for
from slurm_plugin.controller.explain import META_KEY as EXPLAIN_META_KEY
from slurm_plugin.controller.explain import round_summary, vc_rows
from slurm_plugin.controller.metrics import ControllerMetrics
from slurm_plugin.controller.packlimit import HISTORY_WINDOW, current_packlimit, packlimit_json, run_outcomes
from slurm_plugin.controller.profiles import SkewBook
from slurm_plugin.controller.reconcile import Reconciled, build_snapshot, reconcile, same_job
from slurm_plugin.controller.startup import unreachable_line
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.cells.scheduler import CellsPolicy
from teiresias.cells.state import META_KEY as CELLS_META_KEY
from teiresias.cells.state import CellsState
from teiresias.domain import Placement, Plan
from teiresias.domain.plan import Sharing
from teiresias.policy.sjf_bsbf.model import SharingModel
from teiresias.errors import SlurmError, SlurmUnreachable
from teiresias.policy.base import SchedulingPolicy
from wrappers.protocol import job_dir, parse_comment, read_runs

log = logging.getLogger("teiresias.controller")

# Seconds between the requeue of a job and its next release (see _enact).
RESTART_GAP_S = 2.0
# After a failed start: wait this long before the next try, doubling per failure in a row.
START_BACKOFF_S = 60.0
START_BACKOFF_MAX_S = 900.0
# Array tasks split off their meta record per round (one scontrol call each).
SPLIT_PER_ROUND = 64


def build_distribution(seed: Any, samples: list[float]) -> Any:
    """The 2D-Gittins job-size distribution: the seed file's samples plus the
    GPU-seconds of jobs finished under this controller (None when both are empty)."""
    if seed is None and not samples:
        return None
    if seed is None:
        from teiresias.policy.gittins import ServiceDistribution

        return ServiceDistribution(samples)
    return seed.extended(samples) if samples else seed


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "start": {str(j): [{"node": a.node, "gpus": a.gpus} for a in p.allocations]
                  for j, p in plan.start.items()},
        "preempt": list(plan.preempt),
        "keep": list(plan.keep),
        "promote": list(plan.promote),
        "queues": {str(j): q for j, q in plan.queues.items()},
        "order": list(plan.order),
        "reasons": {str(j): r for j, r in plan.reasons.items()},
        "index": {str(j): v for j, v in plan.index.items()},
        "sharing": {str(j): sharing.audit_fields(sh) for j, sh in plan.sharing.items()},
    }


@dataclass
class RoundResult:
    time: float
    round: int
    dry_run: bool
    plan: Plan
    actions: list[Action]
    notes: list[str] = field(default_factory=list)
    jobs: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    packlimit: dict[str, Any] | None = None  # the PACKLIMIT in force and its source

    @property
    def requeued(self) -> bool:
        return any(a.action in ("requeue", "hold") and a.ok for a in self.actions)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "round": self.round, "dry_run": self.dry_run, "jobs": self.jobs,
                "plan": plan_to_json(self.plan), "actions": [a.to_json() for a in self.actions],
                "notes": self.notes, "timings": {k: round(v, 6) for k, v in self.timings.items()},
                **({"packlimit": self.packlimit} if self.packlimit is not None else {})}


class Controller:
    """Owns the state store, the policy and the backend; :meth:`round` is one round."""

    def __init__(self, config: ControllerConfig, backend: SlurmBackend, store: StateStore,
                 audit: AuditLog, *, dry_run: bool = False,
                 policy_factory: Callable[[ControllerConfig, Any], SchedulingPolicy] | None = None) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.audit = audit
        self.dry_run = dry_run
        self._policy_factory = policy_factory or default_policy
        self._seed: Any = None
        if (config.policy.name in ("gittins", "sjf-bsbf", "sjf-ffs") or config.policy.queues_auto) \
                and config.policy.gittins_samples is not None:
            from teiresias.policy.gittins import ServiceDistribution

            self._seed = ServiceDistribution.from_samples_file(config.policy.gittins_samples)
        self._policy: SchedulingPolicy | None = None
        # Active records kept between rounds (the controller is the only writer of
        # the DB); dropped and reloaded after any failed round.
        self._records: dict[int, JobRecord] | None = None
        self._skews = SkewBook(config.profiles)
        self._unpreemptible: set[int] = set()  # --no-requeue jobs already reported
        # What the policy was built with: (Gittins sample count, PACKLIMIT).
        self._policy_key: tuple[Any, ...] | None = None
        # sjf-bsbf / sjf-ffs: model -> xi measured live (docs/sjf-bsbf.md §9); loaded on first use.
        self._measured: dict[str, float] | None = None
        self._packlimit: PackLimitFit | None = None
        self._runs_changed = True  # new run outcomes since the last PACKLIMIT fit
        self._gpus_per_node = 0
        # Failed starts: job -> (not before, failures in a row, why). In memory only:
        # after a restart a failing job is tried once more, then backed off again.
        self._backoff: dict[int, tuple[float, int, str]] = {}
        self._partition_nodes: dict[str, list[str]] = {}  # partition -> its nodes
        self._usage_read: dict[int, float] = {}  # job -> when its usage files were last read
        self._started_stamped: set[tuple[int, int]] = set()  # (job, run) whose "started" stage is written
        # Non-tsbatch jobs: the signal their batch script asks for (they checkpoint and
        # requeue themselves on it), None when it asks for none. Read once per job.
        self._own_signals: dict[int, preemption.SignalSpec | None] = {}
        # Slurm's pokes (controller/events.py): opened by run() when events.socket is set.
        self.events: EventSocket | None = None
        # Prometheus metrics (controller/metrics.py), set by `controller run` when served.
        self.metrics: ControllerMetrics | None = None
        # Run once, at the first round that reaches Slurm, before any record is touched:
        # checks the config against Slurm (ConfigError) and tells the store its cluster
        # (runtime.make_controller; controller/startup.py). Returns notes to log.
        self.on_first_contact: Callable[[list[SlurmNode]], list[str]] | None = None

    # -------------------------------------------------------------- policy
    def policy(self) -> SchedulingPolicy:
        """Rebuilt when its inputs learned from history change: new finished jobs change
        the Gittins distribution (only that policy reads it), new run outcomes the
        PACKLIMIT (Tiresias §3.3.2)."""
        # sjf-bsbf / sjf-ffs estimate job lengths from the same distribution (no durations live).
        uses_samples = self.config.policy.name in ("gittins", "sjf-bsbf", "sjf-ffs") or self.config.policy.queues_auto
        count = self.store.sample_count() if uses_samples else 0
        packlimit = self.packlimit()
        sharing_policy = self.config.policy.name in ("sjf-bsbf", "sjf-ffs")
        if sharing_policy and self._measured is None:
            self._measured = self.store.measured_interference()
        measured = self._measured if sharing_policy and self._measured else {}
        key = (count, packlimit.packlimit, tuple(sorted(measured.items())))
        if self._policy is None or key != self._policy_key:
            dist = build_distribution(self._seed, self.store.samples()) if uses_samples else None
            config = replace(self.config, packlimit=packlimit.packlimit) if packlimit.source == "history" \
                else self.config
            if self._policy is not None and self.metrics is not None and key[0] != (self._policy_key or key)[0]:
                self.metrics.refits.inc()
            self._policy = self._policy_factory(config, dist)
            if measured and isinstance(getattr(self._policy, "model", None), SharingModel):
                self._policy.model = sharing.with_measured(self._policy.model, measured)  # type: ignore[attr-defined]
            self._policy_key = key
        return self._policy

    def packlimit(self) -> PackLimitFit:
        """The PACKLIMIT in force; refitted when run outcomes arrived since the last fit."""
        if self._packlimit is not None and not self._runs_changed:
            return self._packlimit
        old, self._runs_changed = self._packlimit, False
        fit = self._packlimit = current_packlimit(self.config, self.store.runs(latest=HISTORY_WINDOW))
        if old is None:
            log.info("PACKLIMIT %g (%s, %d spread run(s)%s)", fit.packlimit, fit.source, fit.samples,
                     f": {fit.reason}" if fit.reason else "")
        elif fit.packlimit != old.packlimit:
            log.info("PACKLIMIT %g -> %g (%s, %d spread run(s), %d misclassified)", old.packlimit,
                     fit.packlimit, fit.source, fit.samples, fit.misclassified)
            self.audit.write(None, "packlimit", f"{old.packlimit:g} -> {fit.packlimit:g}", source=fit.source,
                             samples=fit.samples, misclassified=fit.misclassified)
        return fit

    # --------------------------------------------------------------- round
    def round(self, now: float | None = None, slurm_jobs: list[SlurmJob] | None = None,
              slurm_nodes: list[SlurmNode] | None = None) -> RoundResult:
        """One round. Raises SlurmUnreachable when slurmctld does not answer."""
        t0 = time.perf_counter()
        if slurm_jobs is None:
            slurm_jobs = self.backend.jobs()
        if slurm_nodes is None:
            slurm_nodes = self.backend.nodes()
        now = time.time() if now is None else now
        if self.on_first_contact is not None:
            for note in self.on_first_contact(slurm_nodes):
                log.warning("%s", note)
            self.on_first_contact = None
            self._records = None  # loaded again, for this cluster only
        t1 = time.perf_counter()
        enactor = Enactor(self.config, self.backend, self.store, self.audit, self.dry_run)
        records = self._records if self._records is not None else self.store.jobs()
        self._records = None  # until this round has completed
        self._refresh_usage(records, now)
        managed = {sj.job_id: sj for sj in slurm_jobs if sj.gpus > 0 and self.config.manages(sj.partition)}
        enactor.targets = {j: sj.target for j, sj in managed.items()}
        enactor.recover(records, managed, now)
        rec = reconcile(self.config, records, slurm_jobs, slurm_nodes, now,
                        backoff={j: (t, why) for j, (t, _, why) in self._backoff.items()})
        # A job that runs, or is gone, starts afresh if it ever fails to start again.
        self._backoff = {j: b for j, b in self._backoff.items()
                         if j in rec.records and rec.records[j].phase in (Phase.PENDING, Phase.STARTING)}
        self._partition_nodes = {}
        for n in slurm_nodes:
            for p in n.partitions:
                self._partition_nodes.setdefault(p, []).append(n.name)
        self._archive_reused_ids(rec)
        self._stamp_timeline(rec)
        self._gpus_per_node = max((n.gpus for n in rec.snapshot.cluster.nodes), default=0)
        if any([self._known_skew(rec.records[j]) for j in rec.created]):
            # A model profiled before: profile placement can use its skew in this very round.
            rec.snapshot = build_snapshot(rec.snapshot.cluster, rec, slurm_nodes, now)
        t2 = time.perf_counter()
        policy = self.policy()
        cells_state = None
        themis_state = None  # themis' leases and rho, stored for the next round (controller/leases.py)
        if isinstance(policy, CellsPolicy):
            # HiveD's virtual->physical binding outlives a round: it comes from the store.
            raw = self.store.get_meta(CELLS_META_KEY)
            plan = policy.decide_cells(rec.snapshot, CellsState.from_json(json.loads(raw)) if raw else None)
            cells_state = json.dumps(plan.cells.to_json())
        else:
            themis = getattr(policy, "name", "") == "themis"
            if themis:
                carried = leases.load(self.store.get_meta(leases.META_KEY))
                leases.prepare(self.config, rec.snapshot, rec.records, carried)
            plan = policy.decide(rec.snapshot)
            if themis and not self.dry_run:
                themis_state = leases.after(rec.snapshot, plan, carried, self.audit, now)
        t3 = time.perf_counter()
        notes = self._bookkeep(rec, plan, now)
        self._enact(enactor, rec, plan, now)
        # Everything the round changed in one transaction; unchanged rows are skipped.
        with self.store.transaction():
            for r in rec.records.values():
                self.store.save_job(r)
        t4 = time.perf_counter()
        records.update(rec.records)
        self._records = {j: r for j, r in records.items() if r.active}
        n = int(self.store.get_meta("rounds", "0") or 0) + 1
        if not self.dry_run:
            # What `teiresias explain` (another process) needs beyond the job records.
            previous = self.store.get_meta(EXPLAIN_META_KEY)
            summary = round_summary(self.config, rec.snapshot, plan, n, json.loads(previous) if previous else None)
            with self.store.transaction():
                self.store.set_meta("rounds", str(n))
                self.store.set_meta("last_round", str(now))
                self.store.set_meta(EXPLAIN_META_KEY, json.dumps(summary))
                if cells_state is not None:
                    self.store.set_meta(CELLS_META_KEY, cells_state)
                if themis_state is not None:
                    self.store.set_meta(leases.META_KEY, themis_state)
        result = RoundResult(now, n, self.dry_run, plan, enactor.actions, notes, len(rec.snapshot.jobs),
                             {"poll_s": t1 - t0, "reconcile_s": t2 - t1, "policy_s": t3 - t2,
                              "enact_s": t4 - t3, "total_s": t4 - t0},
                             packlimit_json(self._packlimit) if self._packlimit is not None else None)
        if self.metrics is not None:
            self.metrics.observe_round(result, rec.records, [rec.records[j] for j in rec.finished], now,
                                       [(v["name"], v["quota_gpus"], v["guaranteed_gpus"], v["opportunistic_gpus"])
                                        for v in vc_rows(plan)], getattr(plan, "migrate", {}))
        return result

    def _stamp_timeline(self, rec: Reconciled) -> None:
        """The timeline stages Slurm's own times give (audit.STAGES): submitted, started, finished."""
        for job_id in rec.created:
            self.audit.stage(job_id, "submitted", rec.records[job_id].submit_time, 0)
        for job_id, seg in rec.segments:  # runs that began and ended between two rounds
            if (job_id, seg.restart_count) not in self._started_stamped:
                self._started_stamped.add((job_id, seg.restart_count))
                self.audit.stage(job_id, "started", seg.start, seg.restart_count)
        for job_id, r in rec.records.items():
            if r.run_start is not None and r.run_restart is not None and \
                    (job_id, r.run_restart) not in self._started_stamped:
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

    def _archive_reused_ids(self, rec: Reconciled) -> None:
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
                why = (f"job {job_id} came back after its record was closed ({old.final_state}): fresh"
                       " record; the closed one is archived")
            else:
                why = (f"job {job_id} is not the job recorded under that id (Slurm submitted it at"
                       f" {sj.submit_time:.0f}, the record's job at {old.submit_time:.0f}"
                       f"{', cluster ' + repr(old.cluster) if old.cluster else ''}): fresh record; the old one"
                       f" ({old.final_state or old.phase.value}) is archived")
            log.warning("[job %d] %s", job_id, why)
            self.audit.write(job_id, "replaced", why, old_submit_time=old.submit_time, old_cluster=old.cluster)

    def _bookkeep(self, rec: Reconciled, plan: Plan, now: float) -> list[str]:
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
        for job_id, r in rec.records.items():
            if job_id in promoted:
                # Tiresias §3.2.3: t_J and delta_J restart from 0.
                r.promo_time = now
                r.promo_executed = accounting.total_executed(r, now)
                self.audit.write(job_id, "promote", "waited >= PROMOTEKNOB x executed time; back to Q1")
            q = plan.queues.get(job_id)  # type: ignore[call-overload]
            if q is not None and q != r.queue:
                self.audit.write(job_id, "queue", f"Q{r.queue + 1} -> Q{q + 1}",
                                 attained_gpu_seconds=round(r.gpus * accounting.executed_time(r, now), 1))
                r.queue = q
            r.rank = rank.get(job_id)  # type: ignore[call-overload]
            if job_id in plan.index:
                r.gittins = float(plan.index[job_id])  # type: ignore[index]
            if r.active:
                r.reason = rec.not_waiting.get(job_id) or (
                    plan.reasons.get(job_id, "") if r.phase is Phase.PENDING else "")  # type: ignore[call-overload]
        for job_id in rec.finished:
            r = rec.records[job_id]
            if not self.dry_run:
                r.skew = self._skews.learn(r) or r.skew
            gpu_s = accounting.attained_gpu_seconds(r, now)
            jct = (r.end_time or now) - r.submit_time
            self.audit.write(job_id, "finished", r.final_state or "", jct=round(jct, 3),
                             attained_gpu_seconds=round(gpu_s, 1),
                             queueing_delay=round(max(0.0, jct - accounting.total_executed(r, r.end_time or now)), 3))
            if not self.dry_run and gpu_s > 0:
                self.store.add_sample(job_id, gpu_s)  # the site's own prior for 2D-Gittins
        # Runs that ended since the last round (finished, requeued by themselves or by Slurm).
        for job_id in dict.fromkeys([*(j for j, _ in rec.segments), *rec.finished]):
            self._record_runs(rec.records[job_id])
        with self.store.transaction():
            for job_id, seg in rec.segments:
                self.store.add_segment(job_id, seg.restart_count, seg.start, seg.end, seg.source)
            # Finished and vanished jobs now: their end must not wait for the enactment.
            for job_id in (*rec.finished, *rec.vanished):
                self.store.save_job(rec.records[job_id])
        return notes

    def _enact(self, enactor: Enactor, rec: Reconciled, plan: Plan, now: float) -> None:
        records = rec.records
        starting = set(plan.start)
        # 1. Jobs that slipped out of control go back on hold (unless started right now).
        for job_id, why in rec.to_hold.items():
            if job_id not in starting:
                enactor.hold(records[job_id], why, now)
                if job_id in rec.start_failed:
                    self._back_off(records[job_id], why, now)
        self._split_arrays(rec.to_split, rec.unheld_arrays)
        # 2. Preemptions the plan asks for. A job still STARTING only needs its hold back.
        free = rec.snapshot.free_gpus()
        for job_id in plan.preempt:
            r = records[job_id]
            if r.phase is Phase.STARTING:
                for a in (r.planned.allocations if r.planned else ()):
                    free[a.node] = free.get(a.node, 0) + a.gpus
                enactor.hold(r, "preempted before Slurm started it", now)
            elif r.phase is Phase.RUNNING:
                why = plan.reasons.get(job_id) or "a higher-priority job needs its GPUs"  # type: ignore[call-overload]
                if not rec.slurm[job_id].requeue:
                    # Submitted with --no-requeue: Slurm refuses the requeue, so it runs to its end.
                    if job_id not in self._unpreemptible:
                        self._unpreemptible.add(job_id)
                        log.warning("[job %d] not preempted: submitted with --no-requeue", job_id)
                        self.audit.write(job_id, "preempt-skipped", "submitted with --no-requeue")
                    continue
                if preemption.speaks_protocol(r):
                    enactor.signal(r, why, now)
                elif (own := self._own_signal(r, rec.slurm[job_id])) is not None:
                    # submitit, Lightning auto_requeue, NeMo: their signal, then they
                    # checkpoint and requeue themselves (docs/job-states.md).
                    enactor.signal(r, f"{why}; it checkpoints itself on {own}", now,
                                   signal=own.signal, scope=own.scope)
                else:
                    # A plain sbatch job has no checkpoint hook: USR1 would just kill
                    # it (FAILED, not requeueable). Requeue it right away instead.
                    if not self.dry_run:  # saved with the journal row
                        r.signal_time, r.signal_restart = now, r.restart_count
                        r.phase, r.phase_since = Phase.PREEMPTING, now
                    act = enactor.requeue(r, preemption.RequeueDue(None, why + "; not a tsbatch job: requeued"
                                                                   " without a checkpoint"), now)
                    if act.ok:
                        self._freed(rec, job_id, free)
        # 3. Preemptions in progress: requeue on Ack or when the grace time is over.
        for job_id, r in records.items():
            if r.phase is Phase.PREEMPTING:
                sj = rec.slurm.get(job_id)
                if sj is None or sj.restart_count != r.signal_restart:
                    continue
                due = preemption.requeue_due(r, now, self.config.preemption.grace_seconds,
                                             None if preemption.speaks_protocol(r) else self._own_signal(r, sj))
                if due is not None:
                    act = enactor.requeue(r, due, now)
                    if act.ok:
                        self._freed(rec, job_id, free)
                        self._learn_skew(r)
                        self._record_runs(r)
        # 4. Starts whose GPUs are free now; the others wait for preempted jobs to leave.
        rank = {j: i for i, j in enumerate(plan.order)}
        for job_id, placement in sorted(plan.start.items(), key=lambda kv: rank.get(kv[0], 0)):
            r = records[job_id]
            if r.preemptions and now - r.phase_since < RESTART_GAP_S:
                # slurmd refuses to start a job in the same wall-clock second its
                # previous run's credential was revoked ("Job credential revoked":
                # the job FAILS), so a just-requeued job waits for the next round.
                r.reason = "requeued a moment ago; starts at the next round"
                continue
            sj = rec.slurm[job_id]
            if job_id in plan.sharing:
                # A guest: its GPUs are its host's (not free), pinned by node (controller/sharing.py).
                self._start_guest(enactor, rec, r, plan.sharing[job_id], placement,  # type: ignore[index]
                                  priority_for(rank.get(job_id, 0), len(plan.order)), free, now)
                continue
            allowed = [n for p in sj.partition.split(",") for n in self._partition_nodes.get(p, [])]
            fitted = fit_shape(placement, sj, free, list(dict.fromkeys(allowed)))
            if fitted is None:
                r.reason = (f"waiting for {sj.num_nodes} node(s) with {sj.gpus_per_node} free GPUs each"
                            " (asked per node; its size is kept)")
                continue
            placement = fitted
            short = {a.node: a.gpus - free.get(a.node, 0) for a in placement.allocations
                     if a.gpus > free.get(a.node, 0)}
            if short:
                r.reason = "waiting for preempted jobs to release " + ", ".join(
                    f"{g} GPU(s) on {n}" for n, g in short.items())
                continue
            for a in placement.allocations:
                free[a.node] -= a.gpus
            q = plan.queues.get(job_id, r.queue)  # type: ignore[call-overload]
            act = enactor.start(r, placement, priority_for(rank.get(job_id, 0), len(plan.order)),
                                sj, f"Q{q + 1}, placed on {','.join(placement.nodes)}", now)
            if act.ok is False:
                self._back_off(r, f"start refused by Slurm ({act.detail.get('error', '?')})", now)

    def _start_guest(self, enactor: Enactor, rec: Reconciled, r: JobRecord, sh: Sharing, placement: Placement,
                     priority: int, free: dict[str, int], now: float) -> None:
        """Plan.sharing: the pair decision in the audit log with its numbers, the guest's
        accumulate.json, then the usual start (node list, release) on the host's node.
        The host's batch never changes (the policy keeps a running job's batch), so the
        host is not restarted."""
        host_id = int(sh.partner)
        host, sj = rec.records.get(host_id), rec.slurm[r.job_id]
        why = sharing.cannot_share(sj, rec.slurm.get(host_id), host, placement, rec.records, rec.slurm, free)
        if why is not None:
            r.reason = why
            return
        assert host is not None
        nums = sharing.audit_fields(sh)
        if not self.dry_run:
            try:
                written = sharing.write_accumulate(r, sj.user, sh)
            except OSError as exc:
                self._back_off(r, f"cannot write its accumulate.json ({exc})", now)
                return
            if written is None and sh.accumulation > 1:
                r.reason = (f"chosen to share job {host_id}'s GPU with {sh.accumulation} accumulation steps, but"
                            " it is not a tsbatch job (no job directory for accumulate.json)")
                return
            self.audit.write(r.job_id, "share", f"shares job {host_id}'s GPU: the pair's average JCT"
                             f" {sh.shared_avg_jct:.0f} s shared vs {sh.sequential_avg_jct:.0f} s one after"
                             " the other", **nums)
        r.shared_with, r.share_role, r.sub_batch, r.accumulation = host_id, "guest", sh.sub_batch, sh.accumulation
        host.shared_with, host.share_role = r.job_id, "host"
        r.shared_since = host.shared_since = now
        r.shared_until = host.shared_until = None
        if not self.dry_run:
            # The guest's side is saved with its start's journal row; the host's first, so a
            # crash in between cannot leave a guest whose host does not know it (end_pairs).
            with self.store.transaction():
                self.store.save_job(host)
        act = enactor.start(r, placement, priority, sj, f"shares job {host_id}'s GPU on"
                            f" {','.join(placement.nodes)} (sub-batch {sh.sub_batch}, {sh.accumulation}"
                            " accumulation steps)", now)
        if act.ok is False:
            r.shared_with = host.shared_with = None
            r.share_role = host.share_role = ""
            r.shared_since = host.shared_since = None
            self._back_off(r, f"start refused by Slurm ({act.detail.get('error', '?')})", now)

    @staticmethod
    def _freed(rec: Reconciled, job_id: int, free: dict[str, int]) -> None:
        """A requeue done: Slurm has released the run's GPUs when `scontrol requeue`
        returns (measured on 22.05: GresUsed drops at once; the node stays COMPLETING
        for KillWait), so the jobs waiting for them are released in this very round
        instead of the next; Slurm starts them once the node is done completing."""
        for j in rec.snapshot.jobs:
            if j.job_id == job_id and j.is_running and j.placement is not None:
                for a in j.placement.allocations:
                    free[a.node] = free.get(a.node, 0) + a.gpus

    def _refresh_usage(self, records: dict[int, JobRecord], now: float) -> None:
        """Measured use of running tsbatch jobs (controller/usage.py), read before
        reconcile so this round's Snapshot carries it; at most every READ_EVERY_S per job."""
        for r in records.values():
            if r.phase in (Phase.RUNNING, Phase.PREEMPTING) and \
                    now - self._usage_read.get(r.job_id, 0.0) >= usage.READ_EVERY_S:
                self._usage_read[r.job_id] = now
                usage.set_usage(r, usage.read_for(r))
        self._usage_read = {j: t for j, t in self._usage_read.items() if j in records}
        self._own_signals = {j: v for j, v in self._own_signals.items() if j in records}

    def _own_signal(self, r: JobRecord, sj: SlurmJob) -> preemption.SignalSpec | None:
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
            self._own_signals[r.job_id] = preemption.signal_spec(script)
        return self._own_signals[r.job_id]

    def _back_off(self, r: JobRecord, why: str, now: float) -> None:
        """A start that failed is not retried at once: the GPUs promised to it
        would sit idle, and other users' jobs could be preempted for it again
        and again. The wait doubles with each failure in a row."""
        if self.dry_run:
            return
        failures = self._backoff.get(r.job_id, (0.0, 0, ""))[1] + 1
        wait = min(START_BACKOFF_S * 2 ** (failures - 1), START_BACKOFF_MAX_S)
        self._backoff[r.job_id] = (now + wait, failures, why)
        r.reason = f"{why}; next try in {wait:.0f}s"
        log.warning("[job %d] start failed: %s; next try in %.0fs", r.job_id, why, wait)
        self.audit.write(r.job_id, "start-failed", why, retry_in_s=wait, failures=failures)

    def _split_arrays(self, tasks: list[str], unheld: list[int]) -> None:
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

    def _known_skew(self, r: JobRecord) -> bool:
        r.skew = self._skews.known(r)
        return r.skew is not None

    def _learn_skew(self, r: JobRecord) -> None:
        """A preempted run may have been the profiled one (Tiresias profiles the first run)."""
        skew = self._skews.learn(r)
        if skew is not None and skew != r.skew:
            r.skew = skew
            with self.store.transaction():
                self.store.save_job(r)

    def _record_runs(self, r: JobRecord) -> None:
        """A run ended: keep its measured iteration time, placement and skew (PACKLIMIT history)."""
        items = parse_comment(r.comment)
        if self.dry_run or not items.get("dir"):
            return  # not a tsbatch job: no hooks, no iteration time
        planned = len(r.planned.nodes) if r.planned is not None else 0
        try:
            outcomes = run_outcomes(r, read_runs(job_dir(items["dir"], r.job_id)), self._gpus_per_node, planned)
        except OSError as exc:
            log.warning("[job %d] iteration times unreadable (%s); not learned from", r.job_id, exc)
            return
        for o in outcomes:
            if self.store.add_run(o):
                self._runs_changed = True
                log.info("[job %d] run %d: %.4f s/iteration on %d node(s), fewest %d, skew %s", r.job_id,
                         o.restart_count, o.median_step_s, o.nodes, o.min_nodes,
                         "unknown" if o.skew is None else f"{o.skew:.3f}")
        if r.shared_since is not None and r.shared_until is not None:
            self._measure_xi(r, job_dir(items["dir"], r.job_id))

    def _measure_xi(self, r: JobRecord, jd: Path) -> None:
        """A run that was shared ended: its xi from the hooks' step counts (alone rate over
        shared rate), kept on the record and fed to the sharing model from now on."""
        since, until = r.shared_since, r.shared_until
        assert since is not None and until is not None
        r.shared_since = r.shared_until = None
        restart = r.closed_restart if r.closed_restart >= 0 else r.restart_count
        xi = sharing.measured_xi(sharing.run_lines(jd, restart), 0.0, since, until, float("inf"))
        if xi is None:
            log.info("[job %d] xi not measured: the hooks write one step count a minute, and the run had"
                     " fewer than two alone or shared", r.job_id)
            return
        r.interference = round(xi, 4)
        self._measured = {**(self._measured or {}), r.name.strip().lower(): xi}
        self.audit.write(r.job_id, "interference", f"xi {xi:.2f} measured while sharing (alone step rate over"
                         " shared)", xi=round(xi, 4), model=r.name, shared_since=since, shared_until=until)

    # ---------------------------------------------------------------- loop
    def run(self, stop: threading.Event, on_round: Callable[[RoundResult], None] | None = None,
            max_backoff: float = 30.0) -> None:
        """Round after round until ``stop`` is set. Slurm unreachable: one line, wait, retry."""
        backoff = self.config.poll_interval
        down_since: float | None = None
        if self.events is None and not self.dry_run:
            self.events = open_events(self.config.events_socket)
        try:
            self._run(stop, on_round, max_backoff, backoff, down_since)
        finally:
            if self.events is not None:
                self.events.close()
                self.events = None

    def _run(self, stop: threading.Event, on_round: Callable[[RoundResult], None] | None, max_backoff: float,
             backoff: float, down_since: float | None) -> None:
        while not stop.is_set():
            try:
                result = self.round()
            except SlurmUnreachable as exc:
                if self.metrics is not None:
                    self.metrics.observe_failure("slurm-unreachable")
                if down_since is None:
                    down_since = time.time()
                    log.warning("%s; retrying every %.0fs at most", unreachable_line(exc), max_backoff)
                log.debug("slurmctld still unreachable; retry in %.1fs", backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, max_backoff)
                continue
            except SlurmError as exc:
                # Slurm refused something unexpected: the state is journalled, the next round retries.
                log.error("round failed: %s; retrying next round", exc)
                if self.metrics is not None:
                    self.metrics.observe_failure("slurm-error")
                stop.wait(self.config.poll_interval)
                continue
            if down_since is not None:
                log.warning("slurmctld answers again after %.0fs; carrying on", time.time() - down_since)
                down_since = None
            backoff = self.config.poll_interval
            if on_round is not None:
                on_round(result)
            # A requeue frees GPUs within a second, and a signalled job's Ack is a file no
            # Slurm event announces: look again soon instead of a full interval.
            soon = result.requeued or any(r.phase is Phase.PREEMPTING for r in (self._records or {}).values())
            self.sleep(stop, min(1.0, self.config.poll_interval) if soon else self.config.poll_interval)

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        """Until the next round: ``seconds``, or less when Slurm pokes (controller/events.py)."""
        if self.events is None:
            stop.wait(seconds)
            return
        events = self.events.wait(seconds, stop)
        if events:
            jobs = sorted({e.job for e in events if e.job is not None})
            log.debug("woken by %d Slurm event(s) (jobs %s)", len(events), ",".join(map(str, jobs)) or "-")


def fitted_queues(config: ControllerConfig, distribution: Any) -> tuple[float, ...]:
    """The queue thresholds in force: with ``policy.queues: auto`` fitted to the GPU-time samples
    (teiresias/policy/thresholds.py; refitted whenever the policy is rebuilt for new samples),
    the configured ones otherwise and while there are no samples yet."""
    if not config.policy.queues_auto or distribution is None:
        return config.policy.queues
    from teiresias.policy.thresholds import fit_thresholds

    fit = fit_thresholds(distribution)
    log.info("queue thresholds fitted to %d GPU-time samples: %s GPU-s", fit.samples,
             ", ".join(f"{q:.0f}" for q in fit.thresholds))
    return fit.thresholds


def default_policy(config: ControllerConfig, distribution: Any) -> SchedulingPolicy:
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator.sharing import load_sharing_model

    params = PolicyParams(queues=fitted_queues(config, distribution), promote_knob=config.policy.promote_knob,
                          last_queue=config.policy.last_queue, distribution=distribution, placement=config.placement,
                          lease=config.policy.lease, fairness_knob=config.policy.fairness_knob,
                          sharing=load_sharing_model(config.policy.sharing) if config.policy.sharing else None,
                          **({"packlimit": config.packlimit} if config.packlimit is not None else {}))
    name = config.policy.name
    if name == "gittins" and distribution is None:
        # Tiresias Pseudocode 1: without a distribution the priority is LAS's.
        log.info("no GPU-time samples yet (no seed file, no finished job): 2D-LAS until there are")
        name = "las"
    ranker = build_policy(name, params)
    if config.cells is not None:
        # HiveD VCs (docs/cells.md): the ranker orders jobs inside each VC.
        return CellsPolicy.from_file(str(config.cells), ranker)
    return ranker
