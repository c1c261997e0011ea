"""The Gandiva policy (OSDI'18 §4): reactive placement plus introspective mechanisms.

Each round, in this order:

1. introspection: unpack packings whose measured throughput lost, pack the
   lightest waiting jobs onto the lightest GPUs (``pools.introspect`` for
   1-GPU jobs, ``packing.introspect`` for groups; only with ``packing``);
2. time-slicing: the 1-GPU jobs of each node rotate across its GPUs
   (``pools.rotate``, §4.1 Figure 9), every multi-GPU group's slice turns
   over (``slicing.rotate``);
3. reactive mode (§4.2.1): waiting jobs in arrival order get a node by
   Algorithm 1 (``affinity.get_node``): idle GPUs, else time-slicing on a
   node of same-size jobs (the newcomer runs its first slice at once: early
   feedback is the design goal), else they wait;
4. grown elastic jobs shrink for jobs that could not get idle GPUs;
5. migration: lower the height onto GPUs still idle, consolidate spread
   jobs, and defragment while jobs wait or time-slice (``migration``);
6. with nothing waiting or time-sliced, elastic jobs grow onto GPUs idle for
   ``idle_period`` (``elastic.grow``).

Non-preemptive: no job ever loses its GPUs to another (suspended jobs keep
theirs). No priorities between jobs: cluster-level fairness is not a goal of
the paper (§4.1); each server is fair by round robin.
"""

from __future__ import annotations

from teiresias.domain import Colocation, Job, JobId, Placement, Plan, Snapshot
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.gandiva import elastic, migration, packing, pools, slicing
from teiresias.policy.gandiva.affinity import get_node
from teiresias.policy.gandiva.params import GandivaParams
from teiresias.policy.gandiva.state import Group, Round, build_round


class GandivaPolicy:
    """Gandiva's scheduler on the policy contract (docs/gandiva.md, "Policy")."""

    name = "gandiva"
    preemptive = False
    # Its plans suspend/colocate/pack/migrate/resize with the owner's mechanisms (base.Slices).
    slices = True

    def __init__(self, placement: PlacementPolicy, params: GandivaParams | None = None) -> None:
        self.placement = placement
        self.params = params if params is not None else GandivaParams()

    def decide(self, snapshot: Snapshot) -> Plan:
        return self._decide(snapshot)[0]

    def wake_at(self, snapshot: Snapshot) -> float:
        """When a round could change something with no arrival or completion: ``snapshot.now`` if
        its plan is not empty, else a slice ending or an idle period passing (inf: never). The
        simulator runs a round there (docs/gandiva.md, "Simulator")."""
        plan, wake = self._decide(snapshot)
        return snapshot.now if not plan.is_empty else wake

    def _decide(self, snapshot: Snapshot) -> tuple[Plan, float]:
        p = self.params
        r = build_round(snapshot)
        wake = float("inf")
        if p.packing:
            wake = min(packing.introspect(r, p.pack_util, p.slice), pools.introspect(r, p.pack_util, p.slice))
        wake = min(wake, slicing.rotate(r, p.slice), pools.rotate(r, p.slice))
        waiting = sorted((j for j in snapshot.jobs if not j.is_running), key=lambda j: (j.submit_time, j.job_id))
        needy: list[Job] = []
        # Once a size fails, later jobs of that size fail too (placing jobs only takes GPUs and slots).
        failed: dict[int, str] = {}
        for job in waiting:
            if job.num_gpus <= 0:
                r.reasons[job.job_id] = "asks for no GPU"
                continue
            # (A job bound to one GPU index fails or fits on its own: not cached by size.)
            got = (None if job.bound_gpus else failed.get(job.num_gpus)) or get_node(
                job, r, self.placement, p.max_height
            )
            if isinstance(got, str):
                if not job.bound_gpus:
                    failed[job.num_gpus] = got
                r.reasons[job.job_id] = got
                needy.append(job)
                continue
            r.notes[job.job_id] = f"start: {got.line} (Algorithm 1)"
            r.touched.add(job.job_id)
            if got.pool is not None:
                pools.hand_over(r, got.pool, job, got.gpu, got.line)
                needy.append(job)
            elif got.group is None:
                r.runs[job.job_id] = True
                placed = r.take(got.placement, job)
                r.start[job.job_id] = placed
                r.add_group(Group(members=[job], placement=placed, packed=False))
            else:
                r.runs[job.job_id] = True
                r.start[job.job_id] = got.placement
                self._join(r, got.group, job)
                needy.append(job)
        if p.grow_shrink:
            elastic.shrink(r, needy)
        if p.migration:
            migration.lower_height(r, self.placement)
            migration.consolidate(r, self.placement, snapshot.cluster.max_gpus_per_node)
            overloaded = bool(needy) or any(g.size > 1 and not g.packed for g in r.groups) or _sliced_pools(r)
            if overloaded:
                migration.defragment(r, p.defrag_threshold)
        if p.grow_shrink and not needy and not any(g.size > 1 for g in r.groups) and not _sliced_pools(r):
            wake = min(wake, elastic.grow(r, p.idle_period))
        return self._plan(snapshot, r), wake

    def _join(self, r: Round, g: Group, job: Job) -> None:
        """Time-slice ``job`` with group ``g`` (Algorithm 1 line 12)."""
        partners = tuple(m.job_id for m in g.members)
        slicing.hand_over(r, g, job)
        r.colocate[job.job_id] = Colocation(
            partners=partners,
            mode="slice",
            reason=f"height {g.size + 1} on {', '.join(g.nodes)}: all GPUs busy,"
            f" time-sliced with job(s) {', '.join(map(str, partners))}",
        )
        r.join(g, job)

    def _plan(self, snapshot: Snapshot, r: Round) -> Plan:
        running = [j for j in snapshot.jobs if j.is_running]
        suspend = tuple(
            j.job_id
            for j in running
            if not j.suspended and not r.runs.get(j.job_id, True) and j.job_id not in r.migrate
        )
        resume = tuple(
            j.job_id for j in running if j.suspended and r.runs.get(j.job_id, False) and j.job_id not in r.migrate
        )
        order = tuple(j.job_id for j in sorted(running, key=lambda j: (j.submit_time, j.job_id)))
        order += tuple(
            j.job_id
            for j in sorted((j for j in snapshot.jobs if not j.is_running), key=lambda j: (j.submit_time, j.job_id))
        )
        ids: list[JobId] = [j.job_id for j in snapshot.jobs]
        return Plan(
            start=dict(r.start),
            keep=tuple(j.job_id for j in running),
            queues={i: 0 for i in ids},
            order=order,
            reasons=dict(r.reasons),
            suspend=suspend,
            resume=resume,
            colocate=dict(r.colocate),
            pack=tuple(r.pack),
            unpack=tuple(r.unpack),
            migrate=dict(r.migrate),
            resize=dict(r.resize),
            devices={
                j: Placement.on({r.pool_of[j].node: (g,)})
                for j, g in r.devices.items()
                if j in r.pool_of and j not in r.migrate and j not in r.start
            },
            notes={
                k: v
                for k, v in r.notes.items()
                if k in r.start
                or k in r.migrate
                or k in r.resize
                or k in r.pack
                or k in r.unpack
                or k in suspend
                or k in resume
                or k in r.devices
            },
        )


def _sliced_pools(r: Round) -> bool:
    """Some node's 1-GPU jobs take turns (a member waits suspended)."""
    return any(not r.runs[m.job_id] for p in r.pools.values() for m in p.members)
