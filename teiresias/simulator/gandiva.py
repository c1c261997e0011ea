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

GPU indices, as Slurm gives them live (docs/gandiva.md "Which GPU a shard job
gets"): a 1-GPU job started alone is bound to its GPU's index for good (its
shard type), a job that joins an over-subscribed node is bound to the node's
GPUs (a shard of each) and runs on the one the plan names (``Plan.devices``).
These pool jobs hold no GPU each in the engine's counts: per node, the pool
holds the GPUs its bound-to-one jobs are bound to plus those its other jobs
run on (``_resync``), which is what the policy counts too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from teiresias.domain import Allocation, Colocation, JobId, JobUsage, Placement, Plan

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
        # Pools (1-GPU jobs bound by index): members per node, and the GPUs they hold in the engine's counts.
        self.pool: dict[str, dict[JobId, SimJob]] = {}
        self.pool_held: dict[str, int] = {}
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
                members = self.pool.get(n, {})
                alloc = self.sim._held.get(n, 0) - self.pool_held.get(n, 0) + len(members) + self.extra.get(n, 0)
                self.max_height = max(self.max_height, -(-alloc // gpus))

    # -- pools -------------------------------------------------------------------
    @staticmethod
    def _device(j: SimJob) -> int:
        assert j.placement is not None
        ids = j.placement.allocations[0].gpu_ids
        return ids[0] if ids else 0

    def _resync(self, node: str, now: float) -> None:
        """The GPUs a node's pool holds in the engine's counts: those its bound-to-one members
        are bound to, and those its others run on."""
        sim = self.sim
        occupied = {
            self._device(m) for m in self.pool.get(node, {}).values() if len(m.bound_gpus) == 1 or not m.suspended
        }
        delta = len(occupied) - self.pool_held.get(node, 0)
        if delta:
            if sim._free.get(node, 0) < delta:
                raise sim.error(
                    f"policy {sim.policy.name} runs {len(occupied)} time-sliced jobs' GPUs on node {node!r},"
                    f" which has {sim._free.get(node, 0) + self.pool_held.get(node, 0)} for them"
                )
            sim._free[node] -= delta
            sim._held[node] = sim._held.get(node, 0) + delta
            sim._free_total -= delta
            sim._set_busy(now, delta)
            self.pool_held[node] = len(occupied)

    def _join_pool(self, j: SimJob, node: str, gpu: int, bound: tuple[int, ...]) -> None:
        """``j`` is a pool member from now: bound to ``bound``, running on ``gpu``; it holds no GPU
        of its own in the engine's counts (the pool does)."""
        j.bound_gpus = bound
        j.placement = Placement((Allocation(node, 0, (gpu,)),))
        self.pool.setdefault(node, {})[j.job_id] = j

    def _binds(self, j: SimJob) -> bool:
        """A job the live controller would start as a shard job: 1 GPU, not elastic (a resize
        needs --gres=gpu:N live, docs/gandiva.md)."""
        return j.num_gpus == 1 and j.elastic is None and j.placement is not None and j.placement.num_nodes == 1

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
        elif j.packed and j.bound_gpus and j.placement is not None and j.placement.num_nodes == 1:
            # A pool job packed with the jobs running on the same GPU of its node.
            node, gpu = j.placement.nodes[0], self._device(j)
            group = [m for m in self.pool.get(node, {}).values() if not m.suspended and self._device(m) == gpu]
            rate = alone * self.sim.opt.slowdown.pack_rate([self._util(m) for m in group])
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
        """A job started on its own GPUs (engine ``_start``); a 1-GPU one is bound to its GPU's
        index (the plan's, else the lowest the pool leaves idle: Slurm's first fit)."""
        assert j.placement is not None
        j.slice_since = now
        self.touch(j.placement, now)
        if self._binds(j):
            node = j.placement.nodes[0]
            ids = j.placement.ids_on(node)
            gpu = j.bound_gpus[0] if len(j.bound_gpus) == 1 else (ids[0] if ids else self._lowest_idle(node))
            # The engine counted its GPU; from now the pool holds it.
            self.pool_held[node] = self.pool_held.get(node, 0) + 1
            self._join_pool(j, node, gpu, j.bound_gpus if j.bound_gpus else (gpu,))
            self._resync(node, now)
        self._height(j.placement.nodes)
        j.settle()
        self.rerate(j, now)

    def _lowest_idle(self, node: str) -> int:
        busy = {self._device(m) for m in self.pool.get(node, {}).values()}
        gpus = self.sim.cluster.node(node).gpus
        return next((i for i in range(gpus) if i not in busy), 0)

    def start_colocated(self, j: SimJob, placement: Placement, co: Colocation, now: float) -> None:
        """Algorithm 1 line 12: ``j`` joins the GPUs its partners hold (a group), or the node
        its partners time-slice (a pool: ``co.gpus`` names the GPUs it may run on)."""
        sim = self.sim
        name = sim.policy.name
        if co.gpus:
            self._start_in_pool(j, placement, co, now)
            return
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

    def _start_in_pool(self, j: SimJob, placement: Placement, co: Colocation, now: float) -> None:
        sim = self.sim
        name = sim.policy.name
        node = placement.nodes[0] if placement.num_nodes == 1 else ""
        ids = placement.ids_on(node)
        members = self.pool.get(node, {})
        if (
            j.num_gpus != 1
            or len(ids) != 1
            or ids[0] not in co.gpus
            or any(p not in members for p in co.partners)
            or not set(co.gpus) <= set(range(sim.cluster.node(node).gpus))
        ):
            raise sim.error(
                f"policy {name} started job {j.job_id} among the time-sliced jobs {list(co.partners)} of"
                f" {node or placement.nodes} on GPU(s) {list(ids)}, not one of theirs"
            )
        sim._to_running(j, placement, now)
        self._join_pool(j, node, ids[0], co.gpus)
        j.suspended = False
        j.slice_since = now
        group = [*members.values()]
        for m in group:
            m.settle()
            m.colocated_with = tuple(o.job_id for o in group if o is not m)
        self._resync(node, now)
        self._height((node,))
        for m in group:
            self.rerate(m, now)

    def _leave_pool(self, j: SimJob, now: float) -> bool:
        """``j`` leaves its node's pool (completion, migration); True if it was in one."""
        if j.placement is None:
            return False
        node = j.placement.nodes[0] if j.placement.num_nodes == 1 else ""
        members = self.pool.get(node)
        if not members or j.job_id not in members:
            return False
        sim = self.sim
        j.settle()
        del members[j.job_id]
        for m in members.values():
            m.settle()
            m.colocated_with = tuple(o for o in m.colocated_with if o != j.job_id)
            if not any(
                o.packed and not o.suspended and self._device(o) == self._device(m)
                for o in members.values()
                if o is not m
            ):
                m.packed = False
        j.colocated_with = ()
        j.packed = False
        del sim._running[j.job_id]
        sim._drop_key(j.job_id)
        j.version += 1
        j.placement = None
        self._resync(node, now)
        for m in members.values():
            self.rerate(m, now)
        return True

    def leave_group(self, j: SimJob, now: float) -> bool:
        """``j`` leaves its group (completion or migration); True if its partners keep the GPUs
        (or its pool holds them: handled here)."""
        if self._leave_pool(j, now):
            return True
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
            if jid in plan.devices:
                self._set_device(j, plan.devices[jid])
            j.packed = True
            j.slice_since = now
            self.packs += 1
        for jid in plan.unpack:
            j = running(jid, "unpack")
            j.packed = False
            j.pack_failed = True
            # Not packed with these jobs again (the policy may try it elsewhere).
            j.pack_failed_with = tuple(sorted({*j.pack_failed_with, *(o for o in plan.unpack if o != jid)}))
            j.slice_since = now
            self.unpacks += 1
        for jid in plan.suspend:
            j = running(jid, "suspend")
            if not j.suspended:
                j.suspended = True
                j.slices += 1
                j.slice_since = now
                self.suspensions += 1
        for jid, to in plan.devices.items():
            if jid not in plan.pack:
                self._set_device(running(jid, "move to another GPU"), to)
        for jid in plan.resume:
            j = running(jid, "resume")
            if j.suspended:
                j.suspended = False
                j.slice_since = now
        for node in {j.placement.nodes[0] for j in affected.values() if j.bound_gpus and j.placement is not None}:
            self._resync(node, now)
        for j in affected.values():
            self.rerate(j, now)
        for jid, to in plan.migrate.items():
            self._migrate(running(jid, "migrate"), to, now)
        for jid, to in plan.resize.items():
            self._resize(running(jid, "resize"), to, now)

    def _set_device(self, j: SimJob, to: Placement) -> None:
        """A pool job runs on another GPU of its node from now (no restart: a device switch)."""
        sim = self.sim
        node = j.placement.nodes[0] if j.placement is not None and j.placement.num_nodes == 1 else ""
        ids = to.ids_on(node)
        if not j.bound_gpus or to.nodes != (node,) or len(ids) != 1 or ids[0] not in j.bound_gpus:
            raise sim.error(
                f"policy {sim.policy.name} moved job {j.job_id} to GPU(s) {list(ids)} of {to.nodes}; it may run"
                f" on GPU(s) {list(j.bound_gpus)} of {node or '?'}"
            )
        j.placement = Placement((Allocation(node, 0, ids),))

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
        if j.bound_gpus and j.num_gpus == 1:
            ids = to.ids_on(to.nodes[0]) if to.num_nodes == 1 else ()
            if to.num_nodes != 1 or not ids or (len(j.bound_gpus) == 1 and ids != j.bound_gpus):
                raise sim.error(
                    f"policy {sim.policy.name} migrated job {j.job_id} to {to.nodes} GPU(s) {list(ids)}; it is"
                    f" bound to GPU(s) {list(j.bound_gpus)} of a node (its shard types)"
                )
            self._leave_pool(j, now)
            sim._running[j.job_id] = j
            self._join_pool(j, to.nodes[0], ids[0], j.bound_gpus)
            j.nodes = to.nodes
            self._resync(to.nodes[0], now)
            self.touch(to, now)
            self._height(to.nodes)
            j.migrations += 1
            self.migrations += 1
            self._restart(j, now)
            return
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
