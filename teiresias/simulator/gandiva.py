"""Gandiva's mechanisms in the simulator (docs/gandiva.md, "Simulator").

The engine (teiresias/simulator/engine.py) keeps GPUs, events and records;
this module enacts a Plan's ``colocate``, ``suspend``/``resume``,
``pack``/``unpack``, ``migrate`` and ``resize`` on its SimJobs, as the owner
of the Gandiva state fields of Job (docs/policy-contract.md rule 6):

- a colocation group holds one set of GPUs, counted once (free, held, busy);
  it is released when its last member leaves;
- a suspended job makes no progress and keeps its GPUs (rate 0, no
  completion event); it waits as a pending job does (SimJob.settle);
- packed jobs all progress, each at ``SlowdownTable.pack_rate`` of the
  members' GPU utilisations (etc/slowdown.yaml);
- a migration or a resize costs ``migration_cost`` seconds of held GPUs
  before progress resumes (default: 6.9 s, measured live; docs/gandiva.md) (as a preemption's restore); after a resize the
  job progresses at new GPUs / asked GPUs of its speed (linear scaling,
  Gandiva §3.1 "Grow-Shrink").

The engine hands the policy what the live hooks would measure: ``usage``
with the model's GPU utilisation, ``solo_step_time`` / ``step_time`` as the
inverse of the alone and current speeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teiresias.domain import Colocation, JobId, JobUsage, Placement, Plan

if TYPE_CHECKING:
    from teiresias.simulator.engine import Simulator
    from teiresias.simulator.simjob import SimJob


# Seconds from a migration's checkpoint signal to the first step on the new node, measured on
# the local cluster (benchmarks/bench_gandiva_live.py, docs/benchmarks.md "Gandiva live costs").
MIGRATION_COST = 6.9


class Mechanisms:
    """Gandiva's state of one replay, and the metrics every replay reports (height, load)."""

    def __init__(self, sim: Simulator, active: bool) -> None:
        self.sim = sim
        self.active = active  # the policy declares Slices (teiresias/policy/base.py)
        self.changed: dict[str, float] = {}  # Snapshot.idle_since
        self.extra: dict[str, int] = {}  # GPUs per node allocated to colocated members beyond the first
        self.max_height = 0
        self.migrations = 0
        self.suspensions = 0
        self.packs = 0
        self.unpacks = 0
        self.resizes = 0
        # Demand (GPUs asked for by every unfinished job) over capacity, integrated over time.
        self._demand = 0
        self._demand_since = sim.t0
        self.demand_integral = 0.0
        self.peak_demand = 0

    # -- metrics ---------------------------------------------------------------
    def demand(self, now: float, delta: int) -> None:
        self.demand_integral += self._demand * (now - self._demand_since)
        self._demand_since = now
        self._demand += delta
        self.peak_demand = max(self.peak_demand, self._demand)

    def _height(self, nodes: tuple[str, ...]) -> None:
        for n in nodes:
            gpus = self.sim.cluster.node(n).gpus
            if gpus > 0:
                alloc = self.sim._held.get(n, 0) + self.extra.get(n, 0)
                self.max_height = max(self.max_height, -(-alloc // gpus))

    def touch(self, placement: Placement, now: float) -> None:
        for n in placement.nodes:
            self.changed[n] = now

    # -- rates -----------------------------------------------------------------
    def _alone_rate(self, j: SimJob) -> float:
        sim = self.sim
        assert j.placement is not None
        min_nodes = -(-j.num_gpus // sim._min_nodes_gpn)
        spread = j.placement.num_nodes > min_nodes
        slowdown = sim.opt.slowdown.profile(j.model_name).slowdown if spread else 1.0
        if slowdown > 1.0:
            j.slowed = True
        return (1.0 / slowdown) * j.num_gpus / max(j.trace.num_gpus, 1)

    def _util(self, j: SimJob) -> float | None:
        return self.sim.opt.slowdown.profile(j.model_name).gpu_util

    def rerate(self, j: SimJob, now: float) -> None:
        """Set ``j``'s speed from its state (settled by the caller) and reschedule its completion."""
        alone = self._alone_rate(j)
        if j.suspended:
            rate = 0.0
        elif j.packed:
            group = [j] + [self.sim._running[p] for p in j.colocated_with if p in self.sim._running]
            rate = alone * self.sim.opt.slowdown.pack_rate([self._util(m) for m in group])
        else:
            rate = alone
        j.rate = rate
        j.solo_step_time = 1.0 / alone
        if rate > 0.0:
            j.step_time = 1.0 / rate
        j.usage = JobUsage(now, self._util(j), None, None, 0.0, 0)
        j.version += 1
        if rate > 0.0:
            self.sim._push(j, now)

    # -- starts and departures ----------------------------------------------------
    def started(self, j: SimJob, now: float) -> None:
        """A job started on its own GPUs (engine ``_start``)."""
        assert j.placement is not None
        j.slice_since = now
        self.touch(j.placement, now)
        self._height(j.placement.nodes)
        j.settle()
        self.rerate(j, now)

    def start_colocated(self, j: SimJob, placement: Placement, co: Colocation, now: float) -> None:
        """Algorithm 1 line 12: ``j`` joins the GPUs its partners hold."""
        sim = self.sim
        name = sim.policy.name
        partners = [sim._running.get(p) for p in co.partners]
        if not co.partners or any(p is None or p.placement != placement for p in partners):
            raise sim.error(
                f"policy {name} colocated job {j.job_id} with job(s) {list(co.partners)}, which are"
                " not all running on exactly its GPUs"
            )
        if placement.num_gpus != j.num_gpus:
            raise sim.error(
                f"policy {name} colocated job {j.job_id} on {placement.num_gpus} GPUs, it needs {j.num_gpus}"
            )
        sim._to_running(j, placement, now)
        group = [p for p in partners if p is not None] + [j]
        for m in group:
            m.settle()
            m.colocated_with = tuple(o.job_id for o in group if o is not m)
            m.packed = co.mode == "pack"
        j.suspended = False
        j.slice_since = now
        for a in placement.allocations:
            self.extra[a.node] = self.extra.get(a.node, 0) + a.gpus
        self._height(placement.nodes)
        for m in group:
            self.rerate(m, now)

    def leave_group(self, j: SimJob, now: float) -> bool:
        """``j`` leaves its group (completion or migration); True if its partners keep the GPUs."""
        sim = self.sim
        partners = [sim._running[p] for p in j.colocated_with if p in sim._running]
        j.colocated_with = ()
        j.packed = False
        if not partners:
            return False
        assert j.placement is not None
        j.settle()
        for a in j.placement.allocations:
            self.extra[a.node] = self.extra.get(a.node, 0) - a.gpus
        del sim._running[j.job_id]
        sim._drop_key(j.job_id)
        j.version += 1
        j.placement = None
        for m in partners:
            m.settle()
            m.colocated_with = tuple(o for o in m.colocated_with if o != j.job_id)
            if not m.colocated_with:
                m.packed = False
        for m in partners:
            self.rerate(m, now)
        return True

    # -- a plan's decisions ------------------------------------------------------
    def enact(self, plan: Plan, now: float) -> None:
        """Pack/unpack, suspend/resume, then migrations and resizes (docs/policy-contract.md rule 6)."""
        sim = self.sim
        name = sim.policy.name
        affected: dict[JobId, SimJob] = {}

        def running(jid: JobId, what: str) -> SimJob:
            j = sim._running.get(jid)
            if j is None:
                raise sim.error(f"policy {name} asked to {what} job {jid}, which is not running")
            j.settle()
            affected[jid] = j
            return j

        for jid in plan.pack:
            j = running(jid, "pack")
            if not j.colocated_with:
                raise sim.error(f"policy {name} packed job {jid}, which shares no GPUs")
            j.packed = True
            j.slice_since = now
            self.packs += 1
        for jid in plan.unpack:
            j = running(jid, "unpack")
            j.packed = False
            j.pack_failed = True
            j.slice_since = now
            self.unpacks += 1
        for jid in plan.suspend:
            j = running(jid, "suspend")
            if not j.suspended:
                j.suspended = True
                j.slices += 1
                j.slice_since = now
                self.suspensions += 1
        for jid in plan.resume:
            j = running(jid, "resume")
            if j.suspended:
                j.suspended = False
                j.slice_since = now
        for j in affected.values():
            self.rerate(j, now)
        for jid, to in plan.migrate.items():
            self._migrate(running(jid, "migrate"), to, now)
        for jid, to in plan.resize.items():
            self._resize(running(jid, "resize"), to, now)

    def _take(self, j: SimJob, to: Placement, keep: Placement | None, what: str) -> None:
        """Move ``j``'s GPUs to ``to``; GPUs of ``keep`` (its own, on a grow) need not be free."""
        sim = self.sim
        own = {a.node: a.gpus for a in keep.allocations} if keep is not None else {}
        for a in to.allocations:
            need = a.gpus - own.get(a.node, 0)
            left = sim._free.get(a.node)
            if left is None or left < need:
                raise sim.error(
                    f"policy {sim.policy.name} {what} job {j.job_id} onto {a.gpus} GPUs of node"
                    f" {a.node!r}, which has {left if left is not None else 'no such node'} free"
                )

    def _move_gpus(self, j: SimJob, old: Placement | None, to: Placement, now: float) -> None:
        sim = self.sim
        if old is not None:
            for a in old.allocations:
                sim._free[a.node] += a.gpus
                sim._held[a.node] -= a.gpus
            sim._free_total += old.num_gpus
            sim._set_busy(now, -old.num_gpus)
            self.touch(old, now)
        for a in to.allocations:
            sim._free[a.node] -= a.gpus
            sim._held[a.node] = sim._held.get(a.node, 0) + a.gpus
        sim._free_total -= to.num_gpus
        sim._set_busy(now, to.num_gpus)
        self.touch(to, now)
        j.placement = to
        j.nodes = to.nodes
        self._height(to.nodes)

    def _restart(self, j: SimJob, now: float) -> None:
        """Checkpoint and restart: the cost is paid holding the new GPUs, as a preemption's restore."""
        sim = self.sim
        cost = sim.opt.migration_cost if sim.opt.migration_cost is not None else MIGRATION_COST
        j.restore_left += cost
        j.overhead += cost
        sim.overhead_total += cost
        j.suspended = False
        j.slice_since = now
        j.work_at_start = j.work_left
        self.rerate(j, now)

    def _migrate(self, j: SimJob, to: Placement, now: float) -> None:
        sim = self.sim
        if to.num_gpus != j.num_gpus:
            raise sim.error(
                f"policy {sim.policy.name} migrated job {j.job_id} to {to.num_gpus} GPUs, it holds"
                f" {j.num_gpus} (a migration keeps the size; resize changes it)"
            )
        self._take(j, to, None, "migrated")
        old = j.placement
        shared = self.leave_group(j, now)
        if shared:  # its partners keep the old GPUs; it is running again, now on its own
            sim._running[j.job_id] = j
        self._move_gpus(j, None if shared else old, to, now)
        j.migrations += 1
        self.migrations += 1
        self._restart(j, now)

    def _resize(self, j: SimJob, to: Placement, now: float) -> None:
        sim = self.sim
        name = sim.policy.name
        lo, hi = j.elastic if j.elastic is not None else (j.num_gpus, j.num_gpus)
        if j.colocated_with or not lo <= to.num_gpus <= hi or to.num_gpus == j.num_gpus:
            raise sim.error(
                f"policy {name} resized job {j.job_id} to {to.num_gpus} GPUs; it is"
                f" {'colocated' if j.colocated_with else f'elastic {lo}-{hi} at {j.num_gpus}'}"
            )
        self._take(j, to, j.placement, "resized")
        old = j.placement
        self._move_gpus(j, old, to, now)
        j.num_gpus = to.num_gpus
        self.resizes += 1
        self._restart(j, now)
