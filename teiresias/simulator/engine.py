"""The trace-driven, event-driven simulator (Tiresias §5.1 "Simulator").

The engine owns the Job objects and the clock; the policy is the very object
the live controller uses (``plan = policy.decide(snapshot)``). One loop:

1. Jump to the next event: an arrival, a completion, or a scheduling tick.
   Ticks fall on the grid ``t0 + k * interval`` and only while some job is
   pending: with nothing pending no plan can start or preempt anything, so a
   tick could not change the schedule.
2. Retire completed jobs, admit arrivals. Job counters (t_J, delta_J,
   progress) need no per-event update: a SimJob computes them from the
   engine's time when read (teiresias/simulator/simjob.py).
3. Run a round (``policy.decide``) on arrivals, ticks, and completions that
   leave a job pending; enact the Plan: preempt, start with the given
   placement, reset t_J / delta_J of promoted jobs, record queue indices.

Two shortcuts, each provably without effect on any result (and tested so):
a tick after a round that planned nothing is skipped until the policy's
``quiet_until`` (its ranking cannot move before; ``_quiet_since``), and a
round may show an ``idle_first`` policy only the pending jobs
(``_pruned_plan``).

Modelled costs:

- Preemption overhead (``preempt_overhead`` seconds) is charged when a
  preempted job resumes: it holds its GPUs that long before progress resumes
  (checkpoint restore), so it also counts in its attained service.
- Placement slowdown: a job whose model is skew-sensitive (``SlowdownTable``)
  and that runs on more nodes than ``ceil(gpus / gpus_per_node)`` progresses
  at ``1 / slowdown`` of its consolidated speed for as long as that placement lasts.

Accounting of Job fields (see teiresias.domain.job): ``executed_time`` (t_J)
and ``waiting_time`` (delta_J) are wall seconds since the last promotion;
``total_executed_time`` is useful work in consolidated seconds, so a job is
done when it reaches ``duration`` and ``Job.remaining_time`` stays exact for
the srtf/srsf oracles.

Deterministic: no randomness at all; ties resolve by trace order.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain

from teiresias.domain import Cluster, JobId, JobState, Placement, Plan, Snapshot
from teiresias.domain.plan import Sharing
from teiresias.errors import TeiresiasError
from teiresias.policy.base import (
    CarriesState,
    KeyRanked,
    SchedulingPolicy,
    WalksKept,
    grants_leases,
    is_idle_first,
    is_preemptive,
    monotone_placement,
    quiet_until_of,
    uses_slices,
    wake_at_of,
    walks_kept,
)
from teiresias.policy.kept import KeptRanking
from teiresias.policy.protect import MinRun, protected_until
from teiresias.policy.themis.apps import app_of
from teiresias.simulator.clock import Clock, SimulatedClock
from teiresias.simulator.gandiva import Mechanisms
from teiresias.simulator.metrics import GandivaFigures, JobRecord, SimulationResult, summarize
from teiresias.simulator.simjob import SimJob, SimTime
from teiresias.simulator.slowdown import SlowdownTable
from teiresias.simulator.trace import TraceJob

_EPS = 1e-6  # seconds; float residue when a job ends exactly at an event
_QUIET_MARGIN = 1e-3  # seconds; a tick this close before a policy's quiet_until still runs (float residue)


class SimulationError(TeiresiasError):
    """The policy returned a plan that cannot be enacted, or the replay cannot progress."""


@dataclass(frozen=True)
class SimulationOptions:
    """Knobs of one replay.

    ``interval``: scheduling period in seconds (ticks while jobs are pending);
    0 disables ticks (pure event-driven). 60 s by default: the order of a
    Slurm scheduler pass and a minute of GPU-time is negligible against the
    1 h (3,600 GPU-s) default queue threshold.
    """

    interval: float = 60.0
    preempt_overhead: float = 0.0
    slowdown: SlowdownTable = field(default_factory=SlowdownTable)
    progress: bool | None = None  # None: a tqdm bar on stderr iff it is a TTY, after progress_delay
    # Seconds a replay runs before the automatic bar shows: short replays
    # finish before a bar would tell anyone anything. progress=True shows it at once.
    progress_delay: float = 2.0
    record_timeline: bool = True
    # Leave running jobs out of a round when that provably changes nothing
    # (policies marked ``idle_first``; see Simulator._round). False: every
    # round sees every job (the reference the tests compare against).
    prune_rounds: bool = True
    # Skip scheduling ticks that provably plan nothing: after a round that
    # changed nothing, until the policy's ``quiet_until`` (policies that have
    # one), as long as nothing arrives or completes. Results are unchanged.
    skip_quiet_ticks: bool = True
    # Keep the running jobs ranked between rounds and hand a contended round only the pending
    # jobs (policies that are ``WalksKept``; Simulator._keyed_plan), with prune_rounds. Results
    # are unchanged; False only to measure what it saves (benchmarks/bench_simulator.py).
    keyed_rounds: bool = True
    # Gandiva (docs/gandiva.md, "Simulator"): seconds a migration or a resize costs the job
    # (checkpoint and restart; None: gandiva.MIGRATION_COST, 6.9 s measured live), and how much work
    # (consolidated seconds) counts as a job's early feedback (Gandiva §4.1).
    migration_cost: float | None = None
    feedback: float = 600.0
    # Minimum run times (teiresias.policy.protect; off by default, the paper's): a running
    # job is not preempted before its protection ends. ``plain_jobs``: the jobs that cannot
    # checkpoint; their preemption loses all their work since they started (counted in
    # Simulator.lost_gpu_seconds), and they get ``min_run.plain``. With a protection in
    # force the pruned, keyed and quiet-skipping rounds are off (a protection's end is
    # no event they see); ticks every ``interval`` notice it.
    min_run: MinRun = field(default_factory=MinRun)
    plain_jobs: frozenset[int] = frozenset()


class Simulator:
    """Replays ``trace`` on ``cluster`` under ``policy``; ``run()`` returns a SimulationResult."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        cluster: Cluster,
        policy: SchedulingPolicy,
        options: SimulationOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.opt = options or SimulationOptions()
        total = cluster.total_gpus
        for tj in trace:
            if tj.num_gpus > total:
                raise SimulationError(f"job {tj.job_id} needs {tj.num_gpus} GPUs, cluster has {total}")
        self.trace = sorted(trace, key=lambda j: j.submit_time)
        t0 = self.trace[0].submit_time if self.trace else 0.0
        self.clock = clock or SimulatedClock(t0)
        self.t0 = t0
        self._min_nodes_gpn = cluster.max_gpus_per_node
        self._free = {n.name: n.gpus for n in cluster.nodes}
        self._free_total = total
        # GPUs held per node by running jobs, every node in node order (a round's ``unavailable``).
        self._held: dict[str, int] = {n.name: 0 for n in cluster.nodes}
        self._pending_gpus = 0  # GPUs asked for by pending jobs
        self._queues: dict[JobId, int] = {}
        # The abilities the policy declares (teiresias/policy/base.py), read as the controller
        # reads them. A policy that carries state sees every round whole: a pruned round's
        # plan would carry the state of a part of the jobs.
        # (isinstance of a Protocol is slow: asked once, here.)
        self._stateful = policy if isinstance(policy, CarriesState) else None
        self._idle_first = self.opt.prune_rounds and is_idle_first(policy) and self._stateful is None
        self._preemptive = is_preemptive(policy)
        self._carry: object = None  # the last full round's plan.carry (CarriesState)
        self.pruned_rounds = 0
        # Rounds that hand the policy the pending jobs and the running ones as a ranking kept
        # here between rounds (_keyed_plan; teiresias.policy.kept).
        keyed = self._idle_first and self.opt.keyed_rounds and walks_kept(policy)
        self._rank_keys = policy.rank_keys if keyed and isinstance(policy, KeyRanked) else None
        self._decide_kept = policy.decide_kept if keyed and isinstance(policy, WalksKept) else None
        self._kept = KeptRanking(cluster) if self._rank_keys is not None else None
        # Running jobs' rank keys are kept (in ``_kept``) until the policy's ``until``: kept
        # job -> its finite until, and the expiry heap of (until, job) (an entry is live while
        # it matches the dict); running jobs whose key must be asked (started since); kept jobs
        # whose key holds no longer than the round (asked again every round).
        self._runtil: dict[JobId, float] = {}
        self._rexpiry: list[tuple[float, JobId]] = []
        self._runkeyed: set[JobId] = set()
        self._rvolatile: set[JobId] = set()
        # Pending jobs whose key must be asked (arrived, preempted or promoted since), and those
        # whose key may move while they wait (the policy ranks them every round); the others
        # are kept in ``_kept`` too, under a key that holds while they wait.
        self._punkeyed: set[JobId] = set()
        self._pvolatile: set[JobId] = set()
        self.keyed_rounds = 0
        self._quiet = quiet_until_of(policy) if self.opt.skip_quiet_ticks else None
        # The "base": the last round that planned nothing, while since then only arrivals
        # happened and every arrival round started its newcomers on idle GPUs (_extended_plan).
        self._base_at: float | None = None
        self._base_new: set[JobId] = set()  # jobs that arrived since the base
        self._base_quiet: float | None = None  # the policy's quiet_until at the base (lazy)
        # Extending the base needs a preemptive policy with quiet_until whose placement's
        # feasibility is monotone in the free GPUs (more free GPUs never make a job unplaceable).
        self._extend = self._idle_first and self._preemptive and self._quiet is not None and monotone_placement(policy)
        rule = self.opt.min_run
        self._protect = rule.checkpointing > 0 or (rule.plain > 0 and bool(self.opt.plain_jobs))
        if self._protect:
            # Protected jobs are pinned by the plain walk (allocate._State): every round whole.
            self._idle_first = self._extend = False
            self._quiet, self._rank_keys = None, None
            self._kept, self._decide_kept = None, None
        self.lost_gpu_seconds = 0.0  # work of plain jobs lost at their preemptions
        self.extended_rounds = 0
        self._time = SimTime(t0)  # what the SimJobs' counters are read against
        self._active: dict[JobId, SimJob] = {}  # arrival order
        self._running: dict[JobId, SimJob] = {}
        self._pending: dict[JobId, SimJob] = {}
        self._events: list[tuple[float, int, int, JobId]] = []  # (end, seq, version, id)
        self._seq = 0
        self._busy = 0
        self._busy_integral = 0.0
        self._busy_since = t0
        self._timeline_t: list[float] = [t0]
        self._timeline_busy: list[int] = [0]
        self._records: list[JobRecord] = []
        self.rounds = 0
        self._idle_since: float | None = None
        self._last_progress = t0  # last time some job's useful work was known to advance
        self.preemptions = 0
        self.overhead_total = 0.0
        # GPU sharing (Plan.sharing): guest -> (host, guest's rate alone at its sub-batch, host's rate before)
        self._share: dict[JobId, tuple[JobId, float, float]] = {}
        # Gandiva's mechanisms (teiresias/simulator/gandiva.py) for a policy that declares Slices
        # (as the controller's Slicer); a policy with ``wake_at`` gets a round at every completion
        # and at the times it names (slice ends, idle periods).
        self._wake_at = wake_at_of(policy)
        self._wake = math.inf
        self._mech = Mechanisms(self, uses_slices(policy))
        self._leases = grants_leases(policy)  # Leases: its plan.leases go back on the jobs
        self._watch: Callable[[float], float] | None = None
        self._t_watch = math.inf
        self._stopped = 0

    def watch(self, watcher: Callable[[float], float]) -> None:
        """Call ``watcher(now)`` after every event; it returns when to be called next at the
        latest (inf: at the next event) and may end jobs early with ``stop_job``: a search
        that early-stops its trials on their progress (benchmarks/bench_gandiva.py)."""
        self._watch = watcher

    def work_done(self, job_id: JobId) -> float | None:
        """Consolidated seconds of work an unfinished job has done by now; None once it ended."""
        j = self._active.get(job_id)
        return None if j is None else j.total_executed_time

    def stop_job(self, job_id: JobId, now: float) -> None:
        """End an unfinished job now, as its owner cancelling it (it counts the work it did)."""
        j = self._active.get(job_id)
        if j is None:
            raise SimulationError(f"job {job_id} cannot be stopped: it is not submitted or already ended")
        self._complete(j, now, stopped=True)
        self._stopped += 1

    def error(self, message: str) -> SimulationError:
        """The error for a plan the engine cannot enact (for teiresias.simulator.gandiva)."""
        return SimulationError(message)

    def decide(self, snapshot: Snapshot) -> Plan:
        """A full round: the policy's plan, a stateful policy handed the state its last
        plan carried (as ``teiresias.policy.base.decide_round`` and the controller's
        ``decide_stored`` do with its stored copy)."""
        if self._stateful is None:
            return self.policy.decide(snapshot)
        plan = self._stateful.decide_from(snapshot, self._carry)
        self._carry = plan.carry
        return plan

    # -- bookkeeping ----------------------------------------------------------
    def _set_busy(self, t: float, delta: int) -> None:
        self._busy_integral += self._busy * (t - self._busy_since)
        self._busy_since = t
        self._busy += delta
        if self.opt.record_timeline:
            if self._timeline_t[-1] == t:
                self._timeline_busy[-1] = self._busy
            else:
                self._timeline_t.append(t)
                self._timeline_busy.append(self._busy)

    def _next_end(self) -> float:
        ev = self._events
        while ev:
            end, _, version, jid = ev[0]
            j = self._running.get(jid)
            if j is not None and j.version == version:
                return end
            heapq.heappop(ev)  # stale: the job was preempted since
        return math.inf

    # -- enacting a plan ----------------------------------------------------
    # Every transition settles the job first (SimJob.settle), so its counters
    # are exact at ``now`` before its state or rate changes.
    def _start(self, j: SimJob, placement: Placement, now: float) -> None:
        free = self._free
        if placement.num_gpus != j.num_gpus:
            raise SimulationError(
                f"policy {self.policy.name} started job {j.job_id} on {placement.num_gpus} GPUs, "
                f"it needs {j.num_gpus} (all-or-nothing)"
            )
        for a in placement.allocations:
            left = free.get(a.node)
            if left is None or left < a.gpus:
                raise SimulationError(
                    f"policy {self.policy.name} placed job {j.job_id} on {a.gpus} GPUs of node {a.node!r} "
                    f"which has {left if left is not None else 'no such node'} free"
                )
            free[a.node] = left - a.gpus
        held = self._held
        for a in placement.allocations:
            held[a.node] = held.get(a.node, 0) + a.gpus
        self._free_total -= j.num_gpus
        self._to_running(j, placement, now)
        if self._rank_keys is not None:
            self._runkeyed.add(j.job_id)
        if j.needs_restore:
            j.restore_left = self.opt.preempt_overhead
            j.overhead += j.restore_left
            self.overhead_total += j.restore_left
            j.needs_restore = False
        min_nodes = -(-j.num_gpus // self._min_nodes_gpn)
        slowdown = self.opt.slowdown.profile(j.model_name).slowdown if placement.num_nodes > min_nodes else 1.0
        j.rate = 1.0 / slowdown
        if slowdown > 1.0:
            j.slowed = True
        end = now + j.restore_left + j.work_left / j.rate
        self._seq += 1
        heapq.heappush(self._events, (end, self._seq, j.version, j.job_id))
        self._set_busy(now, j.num_gpus)

    def _stop(self, j: SimJob, now: float) -> None:
        """Take a running job's GPUs back (preemption or completion)."""
        assert j.placement is not None
        j.settle()
        for a in j.placement.allocations:
            self._free[a.node] += a.gpus
            self._held[a.node] -= a.gpus
        self._free_total += j.num_gpus
        del self._running[j.job_id]
        self._drop_key(j.job_id)
        j.version += 1
        j.placement = None
        self._set_busy(now, -j.num_gpus)

    def _preempt(self, j: SimJob, now: float) -> None:
        if j.shared_with is not None:
            raise SimulationError(
                f"policy {self.policy.name} preempted job {j.job_id}, which shares GPUs"
                " (sharing policies are non-preemptive)"
            )
        self._stop(j, now)
        if j.work_left < j.work_at_start:
            self._last_progress = now
        else:
            self._check_livelock(now)
        if j.job_id in self.opt.plain_jobs:
            # It cannot checkpoint: its next run starts from the beginning. What it ran
            # stays in its executed time (the attained service the policy ranks by).
            self.lost_gpu_seconds += j.num_gpus * (j.trace.duration - j.work_left)
            j.work_left = j.trace.duration
            j.total_executed_time = 0.0
        j.protected_until = None
        j.state = JobState.PENDING
        j.state_since = now
        j.preemptions += 1
        self.preemptions += 1
        # An unfinished restore is paid again in full on resume; only the part
        # actually spent counts as overhead.
        j.overhead -= j.restore_left
        self.overhead_total -= j.restore_left
        j.restore_left = 0.0
        j.needs_restore = True
        self._pending[j.job_id] = j
        if self._kept is not None:
            self._punkeyed.add(j.job_id)
        self._pending_gpus += j.num_gpus

    def _complete(self, j: SimJob, now: float, stopped: bool = False) -> None:
        """Retire a job: its work is done, or (``stopped``) its owner ends it early (``stop_job``)."""
        if j.job_id in self._pending:
            del self._pending[j.job_id]  # stopped before it ever ran again
            self._drop_pending_key(j.job_id)
            self._pending_gpus -= j.num_gpus
            j.settle()
        else:
            if self._mech.active:
                assert j.placement is not None
                self._mech.touch(j.placement, now)
            if not self._leave_pair(j, now) and not self._mech.leave_group(j, now):
                self._stop(j, now)
        self._mech.demand(now, -j.trace.num_gpus)
        if j.feedback_at is None:
            j.feedback_at = now
        self._last_progress = now
        work = j.trace.duration - j.work_left if stopped else j.trace.duration
        j.work_left = 0.0
        j.total_executed_time = work  # exact, whatever the float residue
        del self._active[j.job_id]
        self._queues.pop(j.job_id, None)
        start = j.first_start_time if j.first_start_time is not None else now
        jct = now - j.submit_time
        self._records.append(
            JobRecord(
                job_id=int(j.job_id),
                gpus=j.trace.num_gpus,
                model=j.model_name,
                submit=j.submit_time,
                start=start,
                end=now,
                jct=jct,
                queue_delay=max(jct - j.held_time, 0.0),
                preemptions=j.preemptions,
                overhead=j.overhead,
                slowed=j.slowed,
                nodes=j.nodes,
                app=app_of(j),
                work=work,
                feedback=j.feedback_at - j.submit_time,
                slices=j.slices,
                migrations=j.migrations,
            )
        )

    # -- GPU sharing (sjf-bsbf / sjf-ffs; docs/sjf-bsbf.md) -------------------
    # A guest runs on a subset of its host's GPUs, which stay counted as the
    # host's (free, held, busy); both progress at 1/xi of their alone rate
    # while paired. When one ends, the survivor runs alone again: a host at its
    # old rate, a guest at its sub-batch's rate, now holding its own GPUs.
    def _push(self, j: SimJob, now: float) -> None:
        if j.rate <= 0.0:
            return  # suspended (Gandiva): no completion until it runs again
        end = now + j.restore_left + j.work_left / j.rate
        self._seq += 1
        heapq.heappush(self._events, (end, self._seq, j.version, j.job_id))

    def _start_shared(self, j: SimJob, placement: Placement, sh: Sharing, now: float) -> None:
        host = self._running.get(sh.partner)
        name = self.policy.name
        if host is None or host.shared_with is not None or host.placement is None:
            raise SimulationError(
                f"policy {name} shared job {j.job_id} with job {sh.partner}, which is not running alone"
            )
        on = {a.node: a.gpus for a in host.placement.allocations}
        if placement.num_gpus != j.num_gpus or any(a.gpus > on.get(a.node, 0) for a in placement.allocations):
            raise SimulationError(
                f"policy {name} placed job {j.job_id} on GPUs its partner {sh.partner} does not hold"
                f" ({j.num_gpus} needed)"
            )
        if min(sh.slowdown, sh.partner_slowdown, sh.alone_slowdown) <= 0:
            raise SimulationError(f"policy {name} gave job {j.job_id} a non-positive slowdown")
        self._to_running(j, placement, now)
        alone = 1.0 / sh.alone_slowdown
        j.rate = alone / sh.slowdown
        j.shared_with, j.sub_batch, j.accumulation = host.job_id, sh.sub_batch, sh.accumulation
        host.settle()
        self._share[j.job_id] = (host.job_id, alone, host.rate)
        host.rate /= sh.partner_slowdown
        host.shared_with = j.job_id
        host.version += 1
        self._push(host, now)
        self._push(j, now)

    def _leave_pair(self, j: SimJob, now: float) -> bool:
        """Settle a pair when one of its jobs ends; True if ``j``'s GPUs were handled here."""
        if j.shared_with is None:
            return False
        if j.job_id in self._share:  # the guest ends: its GPUs were the host's all along
            host_id, _, host_rate = self._share.pop(j.job_id)
            j.settle()
            del self._running[j.job_id]
            self._drop_key(j.job_id)
            j.version += 1
            j.placement = None
            j.shared_with = None
            host = self._running[host_id]
            host.settle()
            host.rate = host_rate
            host.shared_with = None
            host.version += 1
            self._push(host, now)
            return True
        guest = self._running[j.shared_with]  # the host ends: the guest takes over its own GPUs
        j.shared_with = None
        self._stop(j, now)
        _, alone, _ = self._share.pop(guest.job_id)
        guest.settle()
        assert guest.placement is not None
        for a in guest.placement.allocations:
            self._free[a.node] -= a.gpus
            self._held[a.node] = self._held.get(a.node, 0) + a.gpus
        self._free_total -= guest.num_gpus
        self._set_busy(now, guest.num_gpus)
        guest.rate = alone
        guest.shared_with = None
        guest.version += 1
        self._push(guest, now)
        return True

    def _pruned_plan(self, now: float) -> Plan | None:
        """The round's plan from a snapshot of the pending jobs alone, where that is provably the plan.

        For a policy marked ``idle_first`` (``teiresias.policy.allocate``: it
        ranks each job by a key of that job alone, then walks the ranking and
        tries a pending job on idle GPUs before it evicts anyone), running
        jobs matter to a round only through the GPUs they hold, unless some
        pending job does not fit the idle ones. So the policy is handed the
        pending jobs, with the running jobs' GPUs as ``unavailable``: the
        pending jobs rank in the same relative order and meet the same idle
        GPUs, so the same ones start on the same GPUs and the same ones are
        promoted. If every pending job started, no job could have been
        evicted in the full round either; a non-preemptive policy never
        evicts, so its pruned plan always holds. Otherwise None: run the full
        round. Only Plan.order / keep / reasons / queues of the running jobs
        differ, and the engine uses none of them (a running job's
        ``queue_index`` reads the last full round).
        """
        if not self._idle_first or not self._running or self._kept is not None:
            return None  # (with kept ranks, a kept round costs less and decides the same)
        if self._preemptive and self._pending_gpus > self._free_total:
            return None  # not every pending job can start: the full round decides
        pending = list(self._pending.values())
        plan = self.policy.decide(Snapshot(now, self.cluster, pending, dict(self._held)))
        if plan.preempt or (self._preemptive and len(plan.start) != len(pending)):
            return None
        return plan

    def _keyed_plan(self, now: float) -> Plan | None:
        """The round's plan from the pending jobs and the running ones as a ranking kept here.

        For a ``WalksKept`` policy (las, gittins: ``KeyRanked``, ``idle_first``,
        preemptive), running jobs matter to a round only through their rank and
        the GPUs they hold, and both change only when a job starts, stops or its
        key moves. So they are kept in a ``KeptRanking`` under the keys the
        policy's ``rank_keys`` gave them, asked again only at a start and at
        their ``until`` (a FIFO-keyed job: its demotion; an index that moves
        with attained service: every round), and the policy is handed the
        pending jobs alone with that ranking (``decide_kept``), which decides
        what ``decide`` on every job would (teiresias.policy.kept; the same
        starts, preemptions and promotions). The plan's order / keep / queues
        leave out the running jobs not preempted; the engine uses none of them
        (a running job's ``queue_index`` reads the last round that saw it).
        """
        kept, rank_keys, decide_kept = self._kept, self._rank_keys, self._decide_kept
        if kept is None or rank_keys is None or decide_kept is None or not self._running or not self._pending:
            return None
        running = self._running
        # Keys to ask: jobs started since (added), and kept jobs whose key may have moved (moved).
        stale = [running[jid] for jid in self._runkeyed]
        self._runkeyed.clear()
        stale.extend(running[jid] for jid in self._rvolatile)
        self._rvolatile.clear()
        expiry, runtil = self._rexpiry, self._runtil
        limit = now + _QUIET_MARGIN
        while expiry and expiry[0][0] <= limit:
            u, jid = heapq.heappop(expiry)
            if runtil.get(jid) == u:
                del runtil[jid]
                stale.append(running[jid])
        if stale:
            by_id = {j.job_id: j for j in stale}
            asked = rank_keys(stale, now)
            kept.rekey_many([(k[-1], k) for k, _ in asked if k[-1] in kept])
            for k, until in asked:
                jid = k[-1]
                if jid not in kept:
                    kept.add(k, by_id[jid])
                if until <= limit:
                    self._rvolatile.add(jid)  # no promise: ask again next round
                    runtil.pop(jid, None)
                elif until < math.inf:
                    runtil[jid] = until
                    heapq.heappush(expiry, (until, jid))
                else:
                    runtil.pop(jid, None)
            if len(expiry) > 4 * len(runtil) + 64:  # mostly entries of jobs since stopped or asked again
                expiry[:] = [t for t in expiry if runtil.get(t[1]) == t[0]]
                heapq.heapify(expiry)
        pending = self._pending
        if self._punkeyed:
            unkeyed = [pending[jid] for jid in self._punkeyed]
            self._punkeyed.clear()
            for k, until in rank_keys(unkeyed, now):
                if until == math.inf:
                    kept.add_waiting(k, pending[k[-1]])
                else:
                    self._pvolatile.add(k[-1])
        return decide_kept(Snapshot(now, self.cluster, [pending[jid] for jid in self._pvolatile]), kept)

    def _to_running(self, j: SimJob, placement: Placement, now: float) -> None:
        """Move a pending job to running on ``placement``, its run beginning ``now``; the caller
        has checked the placement and sets the job's rate."""
        self._pending_gpus -= j.num_gpus
        j.settle()
        del self._pending[j.job_id]
        self._drop_pending_key(j.job_id)
        self._running[j.job_id] = j
        j.state = JobState.RUNNING
        j.placement = placement
        if j.first_start_time is None:
            j.first_start_time = now
        j.state_since = now
        j.nodes = placement.nodes
        j.work_at_start = j.work_left
        if self._protect:
            j.protected_until = protected_until(now, j.job_id not in self.opt.plain_jobs, self.opt.min_run)

    def _drop_pending_key(self, jid: JobId) -> None:
        """Forget a pending job's kept rank (it started, ended, or was promoted)."""
        if self._kept is not None:
            self._kept.discard_waiting(jid)
            self._punkeyed.discard(jid)
            self._pvolatile.discard(jid)

    def _drop_key(self, jid: JobId) -> None:
        """Forget a job's kept rank (it stopped running)."""
        if self._kept is not None:
            self._kept.discard(jid)
        self._runkeyed.discard(jid)
        self._rvolatile.discard(jid)
        self._runtil.pop(jid, None)

    def _quiet_until(self) -> float:
        """The policy's ``quiet_until`` for the jobs of the base round, as they were then.

        Since the base only newcomers arrived (and maybe started on idle GPUs);
        no other job changed state, so reading their counters at the base's
        time gives exactly the base round's snapshot. Asked lazily, once per
        base, when a tick or an arrival needs it.

        With kept ranks (``_keyed_plan``), only the jobs that can give the
        soonest change are asked about (``KeyRanked``: a job whose key holds
        for ever cannot move the ranking, and a job whose key holds until a
        finite time moves it then; tests/unit/test_walk_kept.py checks both of
        every such policy): those whose key may move at any time or was not
        asked yet, those whose promise ran out by the base, and those whose
        promise ends within ``_QUIET_MARGIN`` of the soonest of the others.
        """
        if self._base_quiet is None:
            assert self._quiet is not None and self._base_at is not None
            at, new, active = self._base_at, self._base_new, self._active
            if self._kept is not None:
                runtil, late = self._runtil, at + _QUIET_MARGIN
                soonest = min((u for u in runtil.values() if u > late), default=math.inf)
                near = soonest + _QUIET_MARGIN
                ids = [jid for jid, u in runtil.items() if u <= near]
                moving = chain(ids, self._rvolatile, self._runkeyed, self._pvolatile, self._punkeyed)
                jobs = [active[jid] for jid in moving if jid not in new]
            elif new:
                jobs = [j for j in active.values() if j.job_id not in new]
            else:
                jobs = list(active.values())
            now = self._time.now
            self._time.now = at
            try:
                self._base_quiet = self._quiet(Snapshot(at, self.cluster, jobs))
            finally:
                self._time.now = now
        return self._base_quiet

    def _extended_plan(self, now: float) -> Plan | None:
        """The round's plan from a snapshot of the newcomers alone, where that is provably the plan.

        The base round planned nothing: every job then pending failed to start
        even with every lower-ranked running job's GPUs on offer. Until the
        policy's quiet_until, the base jobs keep their ranking; since then only
        newcomers arrived, each started on idle GPUs without evicting anyone.
        So for a base job still pending, idle GPUs and idle + lower-ranked held
        GPUs are, node by node, at most what they were at the base (newcomers'
        GPUs moved from idle to held, nothing was freed), and with a monotone
        placement it fails again; it evicts no one. A newcomer ranks among
        pending jobs by its own key and meets the current idle GPUs whatever
        its place among the failing base jobs, as in the pruned snapshot. So
        if that snapshot starts every pending newcomer, it is the full plan.
        """
        if self._quiet_until() - _QUIET_MARGIN <= now:
            return None
        pending = self._pending
        newcomers = [pending[jid] for jid in self._base_new if jid in pending]
        if not newcomers:
            return None
        plan = self.policy.decide(Snapshot(now, self.cluster, newcomers, dict(self._held)))
        if plan.preempt or plan.promote or len(plan.start) != len(newcomers):
            return None
        return plan

    def _round(self, now: float) -> bool:
        """One scheduling round; returns whether anything started."""
        active = self._active
        extended = self._extend and self._base_at is not None
        plan = self._extended_plan(now) if extended else None
        if plan is not None:
            self.extended_rounds += 1
            self._queues.update(plan.queues)
        else:
            extended = False
            plan = self._pruned_plan(now)
        if plan is not None:
            if not extended:
                self.pruned_rounds += 1
                self._queues.update(plan.queues)
        else:
            plan = self._keyed_plan(now)
            if plan is not None:
                self.keyed_rounds += 1
                self._queues.update(plan.queues)
            else:
                snapshot = Snapshot(now, self.cluster, list(active.values()), idle_since=self._mech.changed)
                plan = self.decide(snapshot)
                self._queues = dict(plan.queues)
        self.rounds += 1
        for jid in plan.preempt:
            j = self._running.get(jid)
            if j is None:
                raise SimulationError(f"policy {self.policy.name} preempted job {jid}, which is not running")
            self._preempt(j, now)
        for jid, placement in plan.start.items():
            j = self._pending.get(jid)
            if j is None:
                raise SimulationError(f"policy {self.policy.name} started job {jid}, which is not pending")
            if jid in plan.sharing:
                self._start_shared(j, placement, plan.sharing[jid], now)
            elif jid in plan.colocate:
                self._mech.start_colocated(j, placement, plan.colocate[jid], now)
            else:
                self._start(j, placement, now)
                if self._mech.active:
                    self._mech.started(j, now)
        for jid in plan.promote:
            j = active.get(jid)
            if j is not None:
                j.executed_time = 0.0  # Tiresias §3.2.3: t_J and delta_J reset on promotion
                j.waiting_time = 0.0
                if self._kept is not None and jid in self._pending:
                    self._drop_pending_key(jid)  # its key moved
                    self._punkeyed.add(jid)
        for jid, end in plan.leases.items() if self._leases else ():
            j = active.get(jid)
            if j is not None:
                j.lease_end = end  # carried to the next round on the job, as the controller's store does
        if plan.suspend or plan.resume or plan.pack or plan.unpack or plan.migrate or plan.resize or plan.devices:
            self._mech.enact(plan, now)
        if self._wake_at is not None:
            self._wake = self._wake_at(
                Snapshot(now, self.cluster, list(active.values()), idle_since=self._mech.changed)
            )
        # Every job's queue_index now reads from this mapping (SimJob.queue_index): O(1).
        self._time.queues = self._queues
        if self._quiet is not None and not plan.start and not plan.preempt and not plan.promote:
            # Nothing changed: a new base. Until the policy's next possible change (a job
            # crossing a queue threshold or a promotion point) a tick would plan nothing again.
            self._base_at, self._base_new, self._base_quiet = now, set(), None
        elif not extended:
            self._base_at = None
        return bool(plan.start)

    # -- main loop ----------------------------------------------------------
    def _progress_bar(self):
        show = self.opt.progress
        delay = 0.0
        if show is None:
            show = sys.stderr.isatty()
            delay = self.opt.progress_delay
        if not show:
            return None
        from tqdm import tqdm

        return tqdm(
            total=len(self.trace), desc=f"simulate {self.policy.name}", unit="job", file=sys.stderr, delay=delay
        )

    def run(self) -> SimulationResult:
        wall0 = time.perf_counter()
        trace = self.trace
        n = len(trace)
        ai = 0
        interval = self.opt.interval
        bar = self._progress_bar()
        clock = self.clock
        try:
            while ai < n or self._active:
                now = clock.now()
                t_arr = trace[ai].submit_time if ai < n else math.inf
                t_end = self._next_end()
                t_tick = math.inf
                if interval > 0 and self._pending:
                    k = math.floor((now - self.t0) / interval + 1e-9) + 1
                    t_tick = self.t0 + k * interval
                    if self._base_at is not None and t_tick <= min(t_arr, t_end):
                        # Nothing but newcomers that started on idle GPUs since a round that planned
                        # nothing, and the next event is a tick: it would plan nothing either until
                        # the policy's ranking of the base jobs can move. Go to the first tick of
                        # the grid at or after that.
                        quiet = self._quiet_until()
                        if quiet == math.inf:
                            t_tick = math.inf
                        elif t_tick < quiet:
                            k = math.ceil((quiet - _QUIET_MARGIN - self.t0) / interval - 1e-9)
                            t_tick = max(t_tick, self.t0 + k * interval)
                t_wake = self._wake if self._wake > now else math.inf
                t_watch = self._t_watch if self._t_watch > now else math.inf
                t = min(t_arr, t_end, t_tick, t_wake, t_watch)
                if t == math.inf:
                    raise SimulationError(
                        f"policy {self.policy.name} leaves {len(self._pending)} job(s) pending on an idle "
                        "cluster with no future events; the replay cannot finish"
                    )
                now = clock.wait_until(t)
                self._time.now = now
                # Completions first: their GPUs are free for this round.
                done = 0
                while self._events and self._events[0][0] <= now + _EPS:
                    end, _, version, jid = heapq.heappop(self._events)
                    j = self._running.get(jid)
                    if j is not None and j.version == version:
                        self._complete(j, now)
                        done += 1
                arrived = 0
                while ai < n and trace[ai].submit_time <= now + _EPS:
                    tj = trace[ai]
                    job = SimJob(tj, self._time, self.opt.slowdown.profile(tj.model_name).skew)
                    job.feedback_work = min(self.opt.feedback, tj.duration)
                    self._mech.demand(now, tj.num_gpus)
                    self._active[job.job_id] = job
                    self._pending[job.job_id] = job
                    if self._kept is not None:
                        self._punkeyed.add(job.job_id)
                    self._pending_gpus += job.num_gpus
                    if self._base_at is not None:
                        self._base_new.add(job.job_id)
                    ai += 1
                    arrived += 1
                if bar is not None and done:
                    bar.update(done)
                if done:
                    self._base_at = None
                if arrived or t == t_tick or (done and (self._pending or self._mech.active)) or t == t_wake:
                    started = self._round(now)
                    # A policy with wake_at (gandiva) may have more to do at once after its plan is
                    # enacted (a pack once a newcomer's first slice is done, a migration onto GPUs
                    # a completion freed): rounds until it has nothing more for now, at most 8.
                    for _ in range(8):
                        if self._wake > now:
                            break
                        started = self._round(now) or started
                    self._check_progress(now, started, ai >= n)
                if self._watch is not None:
                    # After the round, so it sees the jobs' new speeds; what it stops frees GPUs.
                    self._stopped = 0
                    self._t_watch = self._watch(now)
                    if self._stopped:
                        self._base_at = None
                        if bar is not None:
                            bar.update(self._stopped)
                        self._round(now)
                        for _ in range(8):
                            if self._wake > now:
                                break
                            self._round(now)
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - wall0
        makespan = (max(r.end for r in self._records) - self.t0) if self._records else 0.0
        return summarize(
            policy=self.policy.name,
            records=self._records,
            total_gpus=self.cluster.total_gpus,
            makespan=makespan,
            busy_gpu_seconds=self._busy_integral,
            preemptions=self.preemptions,
            overhead=self.overhead_total,
            wall_seconds=wall,
            rounds=self.rounds,
            timeline=(self._timeline_t, self._timeline_busy) if self.opt.record_timeline else None,
            gandiva=self._gandiva_figures(),
        )

    def _gandiva_figures(self) -> GandivaFigures:
        """Height, load and mechanism counts of the replay (metrics.GandivaFigures)."""
        m = self._mech
        end = max((r.end for r in self._records), default=self.t0)
        m.demand(max(end, m._demand_since), 0)
        span = end - self.t0
        total = self.cluster.total_gpus
        return GandivaFigures(
            avg_load=m.demand_integral / (total * span) if span > 0 and total > 0 else 0.0,
            peak_load=m.peak_demand / total if total > 0 else 0.0,
            max_height=max(m.max_height, 1 if self._records else 0),
            suspensions=m.suspensions,
            migrations=m.migrations,
            packs=m.packs,
            unpacks=m.unpacks,
            resizes=m.resizes,
        )

    def _check_livelock(self, now: float) -> None:
        """Called when a job is preempted before doing any useful work.

        With preemption overhead longer than the time a policy lets a resumed
        job run (continuous priorities re-ranked every short interval), jobs
        can take turns restoring forever and nobody progresses. Fail with the
        reason instead of looping once no job progressed for an hour of
        simulated time (or ten overheads / intervals, if longer).
        """
        limit = max(3600.0, 10 * self.opt.preempt_overhead, 10 * self.opt.interval)
        if now - self._last_progress <= limit:
            return
        if any(r.doing_work() for r in self._running.values()):
            self._last_progress = now
            return
        raise SimulationError(
            f"policy {self.policy.name}: no job made progress for {limit:g} s of simulated time: each resumed job is "
            f"preempted before its {self.opt.preempt_overhead:g} s restore ends; use queues instead of "
            "continuous priorities, a longer --interval, or a smaller --preempt-overhead"
        )

    def _check_progress(self, now: float, started: bool, no_more_arrivals: bool) -> None:
        """Fail loudly instead of looping forever when a policy never starts the last jobs.

        A policy may legitimately leave an idle cluster alone for a few ticks,
        but not for a whole simulated day, and never without ticks to retry.
        """
        if started or self._running or not self._pending or not no_more_arrivals:
            self._idle_since = None
            return
        if self._idle_since is None:
            self._idle_since = now
        if self.opt.interval <= 0 or now - self._idle_since > 86400.0:
            raise SimulationError(
                f"policy {self.policy.name} starts none of {len(self._pending)} pending job(s) on an idle "
                "cluster; the replay cannot finish"
            )


def run(
    trace: Sequence[TraceJob],
    cluster: Cluster,
    policy: SchedulingPolicy,
    options: SimulationOptions | None = None,
) -> SimulationResult:
    """Replay ``trace`` on ``cluster`` under ``policy`` (Tiresias §5.1 simulator); the demo's entry point."""
    return Simulator(trace, cluster, policy, options).run()
