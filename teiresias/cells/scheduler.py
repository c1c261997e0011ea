"""The VC-aware scheduling policy: HiveD cells under a Tiresias ordering.

``CellsPolicy(config, ranker).decide(snapshot) -> CellPlan`` (a Plan, so it
keeps the policy contract of docs/policy-contract.md). One round:

1. Rank every job with ``ranker`` (any registry policy: las, gittins, fifo,
   ...); only its ``order``, ``queues``, ``promote`` and ``index`` are used,
   so 2D-LAS / 2D-Gittins order applies inside each VC (a VC's jobs keep
   their relative global order) and across opportunistic jobs.
2. Rebuild the cell state (world.py) from the running jobs and the stored
   binding (state.py): guaranteed jobs hold cells of their VC, the others are
   opportunistic.
3. Guaranteed pass, highest rank first: a pending job of a VC gets cells
   inside the VC (buddy allocation, binding virtual cells lazily), preempting
   the opportunistic jobs on them, chosen to preempt the fewest. If the VC's
   cells are all taken, lower-ranked running guaranteed jobs of the same VC
   are evicted, lowest first, until it fits (Tiresias Pseudocode 2 inside the
   VC); an evicted job that ends up not in the way gets its cells back.
4. Opportunistic pass, highest rank first: every job still pending (beyond
   its VC's quota, or of an account in no VC) runs on idle GPUs if there are
   enough; it never preempts anyone.

The placement a job gets is node counts (Placement); cells below the node
level are accounted only, the GPU indices inside a node are Slurm's choice.
Where the binding state lives: see state.py. The policy carries it in its
plan (``CellPlan.cells``, also ``plan.carry``: ``teiresias.policy.base.CarriesState``);
the simulator hands it back as the object, the controller through its store
as JSON, both through ``teiresias.policy.base.decide_round``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from teiresias.cells import rebind
from teiresias.cells.config import CellsConfig
from teiresias.cells.faults import bad_nodes_of
from teiresias.cells.model import Cell
from teiresias.cells.report import CellsReport, build_report
from teiresias.cells.state import META_KEY, CellsState
from teiresias.cells.world import World, placement_of
from teiresias.domain import Job, JobId, Placement, Plan, Snapshot
from teiresias.policy.base import SchedulingPolicy


@dataclass(frozen=True)
class CellPlan(Plan):
    """A Plan plus the cell binding after the round and what it means for each VC."""

    cells: CellsState = field(default_factory=CellsState)
    guaranteed: frozenset[JobId] = frozenset()
    # Running guaranteed jobs preempted to move with their rebound cells (rebind.py), and the
    # node counts they are to run on; they are started there once requeued. Not Plan.migrate:
    # a job in Plan.migrate is kept (Gandiva's move, policy-contract rule 6), these are in
    # ``preempt``, and the owners must not run Gandiva's migration on them as well.
    rebound: Mapping[JobId, Placement] = field(default_factory=dict)
    report: CellsReport | None = None


class CellsPolicy:
    """HiveD buddy-cell virtual clusters with the ranking of ``ranker`` (see module doc)."""

    name = "cells"
    # CarriesState (teiresias/policy/base.py): the binding, stored under this key.
    carry_key = META_KEY

    def __init__(
        self, config: CellsConfig, ranker: SchedulingPolicy, bad_nodes: Iterable[str] = (), with_report: bool = True
    ) -> None:
        self.config = config
        self.ranker = ranker
        self.name = f"cells+{ranker.name}"
        self.topology = config.topology()  # immutable; per-round state lives in World
        self.bad_nodes = frozenset(bad_nodes)
        self.with_report = with_report

    def decide(self, snapshot: Snapshot) -> CellPlan:
        return self.decide_cells(snapshot, None)

    def decide_from(self, snapshot: Snapshot, carried: object | None) -> CellPlan:
        """CarriesState: ``carried`` is the previous plan's binding (``plan.carry``)."""
        if carried is not None and not isinstance(carried, CellsState):
            raise TypeError(f"cells policy handed {type(carried).__name__}, not the CellsState it carries")
        return self.decide_cells(snapshot, carried)

    def carry_to_json(self, carry: object) -> dict[str, Any]:
        assert isinstance(carry, CellsState)
        return carry.to_json()

    def carry_from_json(self, data: Any) -> CellsState:
        return CellsState.from_json(data)

    @classmethod
    def from_file(cls, path: str, ranker: SchedulingPolicy, cluster=None) -> CellsPolicy:
        """The policy for a cells YAML file (validated against ``cluster`` when given)."""
        from teiresias.cells import config as cells_config

        return cls(cells_config.load(path, cluster), ranker)

    def world(self, snapshot: Snapshot) -> World:
        caps = {n: nc.gpus for n, nc in self.topology.node_cells.items()}
        # Configured nodes the snapshot's cluster lacks are unusable (never start a job there).
        missing = [n for n in caps if n not in snapshot.cluster]
        unavailable = {**snapshot.unavailable, **{n: caps[n] for n in missing}}
        bad = bad_nodes_of(unavailable, caps, self.bad_nodes)
        return World(self.config, self.topology, bad, unavailable)

    def decide_cells(self, snapshot: Snapshot, state: CellsState | None) -> CellPlan:
        """One round (HiveD §3 under Tiresias ordering); ``state`` is last round's ``plan.cells``."""
        ranked_plan = self.ranker.decide(snapshot)
        jobs = {j.job_id: j for j in snapshot.jobs}
        order = [jobs[i] for i in ranked_plan.order if i in jobs]
        rank = {j.job_id: k for k, j in enumerate(order)}
        w = self.world(snapshot)

        prior = {jc.job_id: jc for jc in state.jobs} if state else {}
        bindings = {(b.vc, b.number): b.cell for b in state.bindings} if state else {}
        running = sorted(
            (j for j in snapshot.jobs if j.is_running),
            key=lambda j: (j.first_start_time if j.first_start_time is not None else snapshot.now, j.job_id),
        )
        # Jobs the store says are guaranteed first: they own their cells.
        for j in sorted(running, key=lambda j: not (prior.get(j.job_id) and prior[j.job_id].guaranteed)):
            w.restore(j, prior.get(j.job_id), bindings)

        start: dict[JobId, Placement] = {}
        preempted: dict[JobId, str] = {}
        migrate: dict[JobId, Placement] = {}  # running guaranteed jobs moved, and where to
        reasons: dict[JobId, str] = {}

        # Guaranteed pass.
        vc_running: dict[str, list[Job]] = {}  # running guaranteed jobs per VC, rank order
        for j in order:
            if j.is_running and j.job_id in w.guaranteed:
                vc_running.setdefault(w.job_vc[j.job_id] or "", []).append(j)
        for j in order:
            if j.is_running:
                continue
            vc = w.vc_of(j)  # the same VC object all round: the world's VCs are never replaced
            if vc is None or j.num_gpus <= 0:
                continue
            got = w.try_guaranteed(j)
            if got is None:
                got = self._rebind_for(w, j, start, preempted, migrate)
            if got is None:
                mine = vc_running.get(vc.name, [])
                got = self._evict_for(w, j, mine, rank, preempted, start, migrate)
            if got is None:
                reasons[j.job_id] = f"VC {vc.name}: no free cells for {j.num_gpus} GPUs in its quota"
                continue
            cells, displaced = got
            for v in displaced:
                preempted[v] = f"opportunistic job preempted for guaranteed job {j.job_id} of VC {vc.name}"
            w.start_guaranteed(j, cells, displaced)
            start[j.job_id] = placement_of(cells)

        # Opportunistic pass.
        for j in order:
            if j.is_running or j.job_id in start:
                continue
            if j.num_gpus <= 0:
                reasons[j.job_id] = "asks for no GPU: not a job for the cells policy"
                continue
            idle_cells = w.try_opportunistic(j)
            if idle_cells is None:
                why = reasons.get(j.job_id)
                idle = w.idle_total()
                opp = f"{idle} idle GPUs, not enough for {j.num_gpus} as an opportunistic job"
                reasons[j.job_id] = f"{why}; {opp}" if why else opp
                continue
            reasons.pop(j.job_id, None)
            w.start_opportunistic(j, idle_cells)
            start[j.job_id] = placement_of(idle_cells)

        # A migrating job's new cells were held for it through this round's passes, so that no
        # lower-ranked job took them; like any preempted job it holds nothing in the stored state.
        for jid in migrate:
            w.drop(jid)
        keep = tuple(j.job_id for j in order if j.is_running and j.job_id not in preempted)
        for jid, why in preempted.items():
            reasons[jid] = why
        return CellPlan(
            start=start,
            preempt=tuple(j.job_id for j in order if j.job_id in preempted),
            keep=keep,
            promote=ranked_plan.promote,
            queues=ranked_plan.queues,
            order=tuple(j.job_id for j in order),
            reasons=reasons,
            index=ranked_plan.index,
            cells=(binding := w.to_state()),
            carry=binding,
            guaranteed=frozenset(w.guaranteed & (set(keep) | set(start))),
            rebound={k: v for k, v in migrate.items() if k in preempted},
            report=build_report(w) if self.with_report else None,
        )

    @staticmethod
    def _rebind_for(
        w: World, job: Job, start: dict[JobId, Placement], preempted: dict[JobId, str], migrate: dict[JobId, Placement]
    ) -> tuple[list[Cell], list[JobId]] | None:
        """Cells for ``job`` after moving other bindings, when only their spread is in the way.

        Only when the VC's private view (its own bindings and jobs, nobody
        else's) could serve the request: then a valid binding is computed
        (rebind.py) and enacted; moved running jobs are preempted and listed
        in ``migrate``, moved jobs started this round start at their new cells.
        """
        vc = w.vc_of(job)
        assert vc is not None
        if job.num_gpus > w.config.quota_gpus(vc.spec) - w.vc_used.get(vc.name, 0):
            return None  # the quota is used up: only evicting the VC's own jobs can help
        key = (vc.name, job.num_gpus)
        if w.no_rebind.get(key) == w.version:
            return None  # the same request failed since the last change: same answer (busy rounds)
        w.no_rebind[key] = w.version
        if not w.could_fit_alone(job):
            return None  # its own cells cannot serve it either (shape, or its own faulty cells)

        def cost(j: JobId) -> tuple[int, int]:
            return (0, 1) if j in start else (1, 0)

        # Nodes merely partly busy outside teiresias (GPUs in transit after a requeue) are not
        # worth a migration: if treating them as healthy needs no move, wait for them instead.
        hard = w.hard_bad_nodes()
        if hard != w.bad_nodes:
            rb = rebind.plan_rebinding(w, vc.name, cost, hard)
            if rb is not None and not rb.moves:
                return None
        rb = rebind.plan_rebinding(w, vc.name, cost, w.bad_nodes)
        if rb is None or not rb.moves:
            return None
        held, displaced = w.apply_rebinding(rb)
        for v in displaced:
            preempted[v] = (
                f"opportunistic job preempted: a guaranteed job moves onto its GPUs (VC bindings "
                f"restored for guaranteed job {job.job_id} of VC {vc.name})"
            )
            start.pop(v, None)
        for j, cells in rb.jobs.items():
            if j in start:
                if j in held:
                    start[j] = placement_of(cells)
                else:
                    del start[j]
            else:
                where = ",".join(f"{a.node}:{a.gpus}" for a in placement_of(cells).allocations)
                preempted[j] = (
                    f"migrated to {where}: its VC's cells are rebound so that guaranteed job "
                    f"{job.job_id} of VC {vc.name} gets its quota"
                )
                if j in held:
                    migrate[j] = placement_of(cells)
        return w.try_guaranteed(job)

    @staticmethod
    def _evict_for(
        w: World,
        job: Job,
        vc_running: list[Job],
        rank: dict[JobId, int],
        preempted: dict[JobId, str],
        start: dict[JobId, Placement],
        migrate: dict[JobId, Placement],
    ) -> tuple[list[Cell], list[JobId]] | None:
        """Evict lower-ranked running guaranteed jobs of ``job``'s VC, lowest first, until it fits.

        ``vc_running``: the VC's running guaranteed jobs in rank order.
        """
        vc = w.vc_of(job)
        assert vc is not None
        lower = [
            j
            for j in reversed(vc_running)
            if rank[j.job_id] > rank[job.job_id] and j.job_id in w.guaranteed and j.job_id not in preempted
        ]
        quota = w.config.quota_gpus(vc.spec)
        if job.num_gpus > quota - w.vc_used.get(vc.name, 0) + sum(j.num_gpus for j in lower):
            return None  # not even evicting them all would free enough of the quota
        evicted: list[tuple[Job, list[Cell]]] = []
        got = None
        for victim in lower:
            evicted.append((victim, w.drop(victim.job_id)))
            got = w.try_guaranteed(job)
            if got is None:
                got = CellsPolicy._rebind_for(w, job, start, preempted, migrate)
            if got is not None:
                break
        if got is None:
            for victim, cells in reversed(evicted):
                if not w.readopt(victim.job_id, cells):  # cannot happen: release undoes allocation
                    preempted[victim.job_id] = f"lost its cells while making room for job {job.job_id}"
            return None
        cells, displaced = got
        taken = {leaf.index for c in cells for leaf in c.leaves()}
        for victim, vcells in sorted(evicted, key=lambda t: rank[t[0].job_id]):
            mine = {leaf.index for c in vcells for leaf in c.leaves()}
            if mine & taken or not w.readopt(victim.job_id, vcells):
                preempted[victim.job_id] = f"preempted by higher-priority job {job.job_id} of VC {vc.name}"
        return got
