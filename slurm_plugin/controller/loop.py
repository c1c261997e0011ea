"""One controller round, and the loop that repeats it.

    poll Slurm -> finish interrupted actions -> reconcile -> policy.decide -> enact

The policy is the very object the simulator uses (teiresias.policy.registry);
this module only builds its Snapshot from Slurm and enacts its Plan.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from slurm_plugin.backends.base import SlurmBackend, SlurmJob, SlurmNode
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import gpus, leases, sharing, slicing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.books import Books
from slurm_plugin.controller.enact import Action, Enactor
from slurm_plugin.controller.events import EventSocket, open_events
from slurm_plugin.controller.explain import META_KEY as EXPLAIN_META_KEY
from slurm_plugin.controller.explain import round_summary, vc_rows
from slurm_plugin.controller.history import History, PolicyFactory
from slurm_plugin.controller.lock import ClusterLock
from slurm_plugin.controller.metrics import ControllerMetrics
from slurm_plugin.controller.packlimit import packlimit_json
from slurm_plugin.controller.preemption import ACK_WATCH_S, Preempter, awaited_acks, first_acked
from slurm_plugin.controller.reconcile import Reconciled, build_snapshot, managed_jobs, reconcile
from slurm_plugin.controller.slicing import Slicer
from slurm_plugin.controller.starts import Starter
from slurm_plugin.controller.startup import unreachable_line
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.cells.scheduler import CellsPolicy
from teiresias.domain import JobState, Plan, Snapshot
from teiresias.errors import SlurmError, SlurmUnreachable
from teiresias.policy.base import (
    CarriesState,
    SchedulingPolicy,
    decide_round,
    grants_leases,
    quiet_until_of,
    uses_slices,
)
from teiresias.policy.protect import MinRun, protected_until

if TYPE_CHECKING:  # imported where used: only a gandiva controller needs it
    from teiresias.policy.gandiva.params import GandivaParams

log = logging.getLogger("teiresias.controller")

# The round for a predicted ranking change runs this long after it (the crossing must
# have happened in the round's own accounting), and never sooner than MIN_SLEEP_S after
# the last round: a policy that promises a change every instant cannot make the loop spin.
QUIET_MARGIN_S = 0.05
MIN_SLEEP_S = 0.1


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "start": {str(j): [{"node": a.node, "gpus": a.gpus} for a in p.allocations] for j, p in plan.start.items()},
        "preempt": list(plan.preempt),
        "keep": list(plan.keep),
        "promote": list(plan.promote),
        "queues": {str(j): q for j, q in plan.queues.items()},
        "order": list(plan.order),
        "reasons": {str(j): r for j, r in plan.reasons.items()},
        "index": {str(j): v for j, v in plan.index.items()},
        "sharing": {str(j): sharing.audit_fields(sh) for j, sh in plan.sharing.items()},
    }


def decide_stored(policy: CarriesState, snapshot: Snapshot, stored: str | None) -> tuple[Plan, str]:
    """One round of a policy that carries state in its plan (teiresias/policy/base.py),
    its state handed back from the store's JSON text ``stored`` (None: none yet);
    returns the plan and the JSON text to store for the next round. The simulator
    hands the object back instead (``Simulator.decide``); the JSON round-trips
    exactly, so both decide the same for the same snapshots."""
    carried = policy.carry_from_json(json.loads(stored)) if stored else None
    plan = decide_round(policy, snapshot, carried)
    return plan, json.dumps(policy.carry_to_json(plan.carry))


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
        return {
            "time": self.time,
            "round": self.round,
            "dry_run": self.dry_run,
            "jobs": self.jobs,
            "plan": plan_to_json(self.plan),
            "actions": [a.to_json() for a in self.actions],
            "notes": self.notes,
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
            **({"packlimit": self.packlimit} if self.packlimit is not None else {}),
        }


class Controller:
    """Owns the state store, the policy and the backend; :meth:`round` is one round."""

    def __init__(
        self,
        config: ControllerConfig,
        backend: SlurmBackend,
        store: StateStore,
        audit: AuditLog,
        *,
        dry_run: bool = False,
        policy_factory: PolicyFactory | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.store = store
        self.audit = audit
        self.dry_run = dry_run
        # What is learned from past jobs, and the policy built from it.
        self.history = History(config, store, audit, dry_run=dry_run, policy_factory=policy_factory or default_policy)
        self.preempter = Preempter(config, backend, audit, dry_run=dry_run)
        self.starter = Starter(config, store, audit, dry_run=dry_run)
        # Gandiva's suspend/resume, colocation, packing, migration, resize (controller/slicing.py);
        # its state is loaded from the store at the first round of a Slices policy.
        self.slicer: Slicer | None = None
        # Active records kept between rounds (the controller is the only writer of
        # the DB); dropped and reloaded after any failed round.
        self._records: dict[int, JobRecord] | None = None
        # Preemptions (job, signalled run) whose Ack has already ended a sleep early.
        self._ack_woken: set[tuple[int, int | None]] = set()
        # When the last round's ranking changes with no event (a job crossing a queue
        # threshold, a promotion): the policy's quiet_until, the loop's next round at most.
        self.next_change: float | None = None
        self.books = Books(config, backend, store, audit, self.history, dry_run=dry_run)
        # Slurm's pokes (controller/events.py): opened by run() when events.socket is set.
        self.events: EventSocket | None = None
        # Prometheus metrics (controller/metrics.py), set by `controller run` when served.
        self.metrics: ControllerMetrics | None = None
        # The lock of the Slurm cluster (lock.ClusterLock), once taken at the first contact;
        # released with the process (Controller.close).
        self.cluster_lock: ClusterLock | None = None
        # Run once, at the first round that reaches Slurm, before any record is touched:
        # checks the config against Slurm (ConfigError) and tells the store its cluster
        # (runtime.make_controller; controller/startup.py). Returns notes to log.
        self.on_first_contact: Callable[[list[SlurmNode]], list[str]] | None = None

    # -------------------------------------------------------------- policy
    def policy(self) -> SchedulingPolicy:
        """The policy in force, as learned from history (controller/history.py)."""
        return self.history.policy(self.metrics)

    # --------------------------------------------------------------- round
    def round(
        self,
        now: float | None = None,
        slurm_jobs: list[SlurmJob] | None = None,
        slurm_nodes: list[SlurmNode] | None = None,
    ) -> RoundResult:
        """One round. Raises SlurmUnreachable when slurmctld does not answer."""
        t0 = time.perf_counter()
        self.next_change = None  # until this round's plan says otherwise
        polled = slurm_jobs is None
        if slurm_jobs is None and slurm_nodes is None:
            slurm_jobs, slurm_nodes = self.backend.jobs_and_nodes()
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
        self.books.refresh_usage(records, now)
        self.preempter.forget(records)
        managed = managed_jobs(self.config, slurm_jobs)
        enactor.targets = {j: sj.target for j, sj in managed.items()}
        if any(a.ok for a in enactor.recover(records, managed, now)) and polled:
            # A crash's action was finished (a requeue, hold or start): what was read above
            # is stale, and a job requeued just now would still look running (it would be
            # preempted a second time, its signal refused). Rare: only after a crash.
            slurm_jobs, slurm_nodes = self.backend.jobs_and_nodes()
            managed = managed_jobs(self.config, slurm_jobs)
            enactor.targets = {j: sj.target for j, sj in managed.items()}
        enactor.typed = gpus.typed_nodes(slurm_nodes)
        self.books.reopen_requeued(records, managed, now)
        rec = reconcile(self.config, records, slurm_jobs, slurm_nodes, now, backoff=self.starter.waits())
        self.starter.observe(rec, slurm_nodes)
        self.books.archive_reused_ids(rec)
        self.books.stamp_timeline(rec)
        self.history.gpus_per_node = max((n.gpus for n in rec.snapshot.cluster.nodes), default=0)
        self.history.learn_costs(rec.records.values())
        if any([self.history.known_skew(rec.records[j]) for j in rec.created]):
            # A model profiled before: profile placement can use its skew in this very round.
            rec.snapshot = build_snapshot(rec.snapshot.cluster, rec, slurm_nodes, now)
        self.protect(rec)
        t2 = time.perf_counter()
        policy = self.policy()
        carry_state = None  # a CarriesState policy's plan.carry, stored for the next round
        lease_state = None  # a Leases policy's leases and rho, stored for the next round (controller/leases.py)
        if isinstance(policy, CarriesState):
            # HiveD's virtual->physical binding outlives a round: it comes from the store.
            plan, carry_state = decide_stored(policy, rec.snapshot, self.store.get_meta(policy.carry_key))
        else:
            # The abilities the policy declares (teiresias/policy/base.py), read as the simulator
            # reads them: never by the policy's name, so a renamed or new policy gets the same care.
            leasing = grants_leases(policy)
            if leasing:
                carried = leases.load(self.store.get_meta(leases.META_KEY))
                leases.prepare(self.config, rec.snapshot, rec.records, carried)
            if uses_slices(policy):
                if self.slicer is None:
                    self.slicer = Slicer(self.backend, self.audit, dry_run=self.dry_run)
                    self.slicer.members = slicing.load(self.store.get_meta(slicing.META_KEY))
                    self.starter.colocate = self.slicer.start_colocated
                self.slicer.annotate(rec, now)
            plan = policy.decide(rec.snapshot)
            if leasing and not self.dry_run:
                lease_state = leases.after(rec.snapshot, plan, carried, self.audit, now)
        plan = self.starter.gate(rec, plan)
        quiet = quiet_until_of(policy)
        self.next_change = quiet(after_plan(rec.snapshot, plan)) if quiet is not None else None
        t3 = time.perf_counter()
        notes = self.books.bookkeep(rec, plan, now)
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
                if carry_state is not None and isinstance(policy, CarriesState):
                    self.store.set_meta(policy.carry_key, carry_state)
                if lease_state is not None:
                    self.store.set_meta(leases.META_KEY, lease_state)
                if self.slicer is not None:
                    self.store.set_meta(slicing.META_KEY, slicing.dump(self.slicer.members))
        result = RoundResult(
            now,
            n,
            self.dry_run,
            plan,
            enactor.actions,
            notes,
            len(rec.snapshot.jobs),
            {"poll_s": t1 - t0, "reconcile_s": t2 - t1, "policy_s": t3 - t2, "enact_s": t4 - t3, "total_s": t4 - t0},
            packlimit_json(self.history.packlimit_fit) if self.history.packlimit_fit is not None else None,
        )
        if self.metrics is not None:
            self.metrics.observe_round(
                result,
                rec.records,
                [rec.records[j] for j in rec.finished],
                now,
                [(v["name"], v["quota_gpus"], v["guaranteed_gpus"], v["opportunistic_gpus"]) for v in vc_rows(plan)],
                getattr(plan, "rebound", {}),
            )
        return result

    def protect(self, rec: Reconciled) -> None:
        """Each running job's protection from preemption (Job.protected_until, the one rule
        in teiresias.policy.protect the simulator applies too): a minimum run time from its
        run's start (Slurm's StartTime; a job being started counts from its release),
        longer for a job that cannot checkpoint; a --no-requeue job is never preempted."""
        pre = self.config.preemption
        rule = MinRun(pre.min_run_seconds, pre.plain_min_run_seconds)
        for j in rec.snapshot.jobs:
            if not j.is_running or j.job_id not in rec.slurm:
                continue
            r, sj = rec.records[j.job_id], rec.slurm[j.job_id]
            if not sj.requeue:
                j.protected_until = math.inf  # Slurm refuses its requeue: plans must not count on it
                continue
            start = r.run_start if r.run_start is not None else r.phase_since
            keeps_work = rule.plain == rule.checkpointing or self.preempter.checkpoints(r, sj)
            j.protected_until = protected_until(start, keeps_work, rule)

    def _enact(self, enactor: Enactor, rec: Reconciled, plan: Plan, now: float) -> None:
        """The plan's actions in their order; each step's requeues free GPUs for the next."""
        starting = set(plan.start)
        # 1. Jobs that slipped out of control go back on hold (unless started right now).
        for job_id, why in rec.to_hold.items():
            if job_id not in starting:
                enactor.hold(rec.records[job_id], why, now)
                if job_id in rec.start_failed:
                    self.starter.back_off(rec.records[job_id], why, now)
        self.books.split_arrays(rec.to_split, rec.unheld_arrays)
        self.books.hand_back(rec.to_release)
        # 2. Preemptions the plan asks for. 3. Those in progress: requeue on Ack or grace over.
        free = rec.snapshot.free_gpus()
        moves = plan
        if self.slicer is not None:
            # Gandiva: suspend/resume/pack/unpack now; migrations and resizes are
            # preempted like the plan's preemptions, then restarted on their targets.
            self.slicer.resume_before_preempt(rec, plan, now)
            self.slicer.enact(rec, plan, now)
            moves = self.slicer.moving(plan)
        self.preempter.preempt(enactor, rec, moves, free, now, frozenset(moves.preempt) - frozenset(plan.preempt))
        self.preempter.requeue_ready(enactor, rec, free, now, self._requeued)
        # 4. Starts whose GPUs are free now; the others wait for preempted jobs to leave.
        self.starter.start(enactor, rec, plan, free, now)
        if self.slicer is not None:
            self.slicer.started(rec, plan, now)
            self.slicer.restart_moved(enactor, rec, now)

    def _requeued(self, r: JobRecord) -> None:
        """A run ended by our requeue: learn from it (its profile, its iteration times)."""
        self.history.learn_skew(r)
        self.history.record_runs(r)

    # ---------------------------------------------------------------- loop
    def run(
        self, stop: threading.Event, on_round: Callable[[RoundResult], None] | None = None, max_backoff: float = 30.0
    ) -> None:
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

    def _run(
        self,
        stop: threading.Event,
        on_round: Callable[[RoundResult], None] | None,
        max_backoff: float,
        backoff: float,
        down_since: float | None,
    ) -> None:
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
            wait = min(1.0, self.config.poll_interval) if soon else self.config.poll_interval
            if self.starter.wake_in is not None:
                # A start left for Slurm's requeue settle goes at the round right after it.
                wait = min(wait, self.starter.wake_in)
            self.sleep(stop, min(wait, self.until_next_change(result.time)))

    def until_next_change(self, round_time: float) -> float:
        """Seconds until the round that sees the ranking change (a demotion or promotion,
        Tiresias §3.2.3), a little after it so the crossing has happened; inf when the
        policy promises nothing (no quiet_until, or none past the round). A site's poll
        interval would otherwise make a demoted job keep its GPUs for up to that long."""
        when = self.next_change
        if when is None or not math.isfinite(when) or when <= round_time:
            return math.inf
        return max(when + QUIET_MARGIN_S - time.time(), MIN_SLEEP_S)

    def sleep(self, stop: threading.Event, seconds: float) -> None:
        """Until the next round: ``seconds``, or less when Slurm pokes (controller/events.py)
        or a signalled job writes its Ack (looked for every ``ACK_WATCH_S``; an Ack written
        during the round ends the sleep at once). Each preemption wakes the loop once: a
        round that could not requeue it (dry run, a Slurm error) does not make it spin."""
        awaited = awaited_acks((self._records or {}).values())
        self._ack_woken &= {(r.job_id, r.signal_restart) for r in awaited}
        watched = [r for r in awaited if (r.job_id, r.signal_restart) not in self._ack_woken]
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            acked = first_acked(watched) if watched else None
            if acked is not None:
                self._ack_woken.add((acked.job_id, acked.signal_restart))
                log.debug("[job %d] woken by its checkpoint Ack", acked.job_id)
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            step = min(left, ACK_WATCH_S) if watched else left
            if self.events is None:
                stop.wait(step)
            else:
                events = self.events.wait(step, stop)
                if events:
                    jobs = sorted({e.job for e in events if e.job is not None})
                    log.debug("woken by %d Slurm event(s) (jobs %s)", len(events), ",".join(map(str, jobs)) or "-")
                    return


def after_plan(snapshot: Snapshot, plan: Plan) -> Snapshot:
    """The snapshot as the plan leaves it: its starts running from now, its preemptions
    waiting. What the next demotion is predicted from, since a job the round starts
    crosses its threshold from this instant (the simulator predicts from the same state)."""
    if not plan.start and not plan.preempt:
        return snapshot
    jobs = []
    for j in snapshot.jobs:
        placement = plan.start.get(j.job_id)
        if placement is not None and not j.is_running:
            first = j.first_start_time if j.first_start_time is not None else snapshot.now
            j = replace(j, state=JobState.RUNNING, placement=placement, first_start_time=first)
        elif j.job_id in plan.preempt:
            j = replace(j, state=JobState.PENDING, placement=None)
        jobs.append(j)
    return replace(snapshot, jobs=jobs)


def fitted_queues(config: ControllerConfig, distribution: Any) -> tuple[float, ...]:
    """The queue thresholds in force: with ``policy.queues: auto`` fitted to the GPU-time samples
    (teiresias/policy/thresholds.py; refitted whenever the policy is rebuilt for new samples),
    the configured ones otherwise and while there are no samples yet."""
    if not config.policy.queues_auto or distribution is None:
        return config.policy.queues
    from teiresias.policy.thresholds import fit_thresholds

    fit = fit_thresholds(distribution)
    log.info(
        "queue thresholds fitted to %d GPU-time samples: %s GPU-s",
        fit.samples,
        ", ".join(f"{q:.0f}" for q in fit.thresholds),
    )
    return fit.thresholds


def gandiva_params(config: ControllerConfig) -> GandivaParams | None:
    """GandivaParams from the config's policy.gandiva knobs (teiresias.config.GANDIVA_KEYS:
    numbers parsed as floats, switches as bools); None: its defaults."""
    if not config.policy.gandiva:
        return None
    from teiresias.policy.gandiva.params import GandivaParams

    knobs = dict(config.policy.gandiva)
    d = GandivaParams()
    return GandivaParams(
        slice=knobs.get("slice", d.slice),
        max_height=int(knobs.get("max_height", d.max_height)),
        packing=bool(knobs.get("packing", d.packing)),
        pack_util=knobs.get("pack_util", d.pack_util),
        migration=bool(knobs.get("migration", d.migration)),
        defrag_threshold=int(knobs.get("defrag_threshold", d.defrag_threshold)),
        grow_shrink=bool(knobs.get("grow_shrink", d.grow_shrink)),
        idle_period=knobs.get("idle_period", d.idle_period),
    )


def default_policy(config: ControllerConfig, distribution: Any) -> SchedulingPolicy:
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator.sharing import load_sharing_model

    params = PolicyParams(
        queues=fitted_queues(config, distribution),
        promote_knob=config.policy.promote_knob,
        last_queue=config.policy.last_queue,
        queue_order=config.policy.queue_order,
        time_limits=config.policy.time_limits,
        distribution=distribution,
        placement=config.placement,
        lease=config.policy.lease,
        fairness_knob=config.policy.fairness_knob,
        preempt_cost=config.policy.preempt_cost,
        sharing=load_sharing_model(config.policy.sharing) if config.policy.sharing else None,
        gandiva=gandiva_params(config),
    )
    if config.packlimit is not None:
        params = replace(params, packlimit=config.packlimit)
    name = config.policy.name
    if name == "gittins" and distribution is None:
        # Tiresias Pseudocode 1: without a distribution the priority is LAS's.
        log.info("no GPU-time samples yet (no seed file, no finished job): 2D-LAS until there are")
        name = "las"
        # ... in gittins' order inside a queue, which the queues alone can follow.
        params = replace(params, queue_order=params.queue_order or "lifo-resume")
    ranker = build_policy(name, params)
    if config.cells is not None:
        # HiveD VCs (docs/cells.md): the ranker orders jobs inside each VC.
        return CellsPolicy.from_file(str(config.cells), ranker)
    return ranker
