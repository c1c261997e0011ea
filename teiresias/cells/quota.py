"""The baseline HiveD is compared with: plain per-tenant GPU quotas (HiveD §2, "quota-based").

Each VC's quota is just a GPU count (the GPUs of its cells). A job inside its
tenant's quota is guaranteed (high priority): it is placed wherever enough
GPUs are free with the affinity it needs (one node when it fits in a node,
else whole nodes plus one node for the remainder), best fit, preempting
opportunistic jobs if it must. Nothing reserves affinity for the tenant: when
every node is partly held by other tenants' guaranteed jobs, a tenant within
its quota still waits for a whole node. That is the *sharing anomaly*.

Jobs beyond their quota (and of accounts in no VC) run opportunistically on
idle GPUs. Ranking and eviction inside a tenant follow ``ranker`` exactly as
in ``CellsPolicy``, so that the two differ only in cells vs. GPU counts.
Pure, like every policy: the guaranteed set is rebuilt each round from the
running jobs, oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teiresias.cells.config import CellsConfig
from teiresias.cells.faults import bad_nodes_of
from teiresias.domain import JobId, Placement, Plan, Snapshot
from teiresias.policy.base import SchedulingPolicy


@dataclass(frozen=True)
class QuotaPlan(Plan):
    guaranteed: frozenset[JobId] = field(default_factory=frozenset)


@dataclass
class _Nodes:
    """Per-node GPU bookkeeping of one round: capacity, and who holds what."""

    cap: dict[str, int]
    order: dict[str, int]
    holders: dict[str, dict[JobId, int]]

    def idle(self, n: str) -> int:
        return max(self.cap[n] - sum(self.holders[n].values()), 0)

    def hold(self, job: JobId, placement: Placement) -> None:
        for a in placement.allocations:
            self.holders.setdefault(a.node, {})[job] = a.gpus

    def drop(self, job: JobId, placement: Placement) -> None:
        for a in placement.allocations:
            self.holders.get(a.node, {}).pop(job, None)


class QuotaPolicy:
    """Plain GPU-count quotas per tenant with opportunistic jobs (module doc)."""

    def __init__(self, config: CellsConfig, ranker: SchedulingPolicy) -> None:
        self.config = config
        self.ranker = ranker
        self.name = f"quota+{ranker.name}"
        self.quota = {vc.name: config.quota_gpus(vc) for vc in config.vcs}

    def decide(self, snapshot: Snapshot) -> QuotaPlan:
        ranked_plan = self.ranker.decide(snapshot)
        jobs = {j.job_id: j for j in snapshot.jobs}
        order = [jobs[i] for i in ranked_plan.order if i in jobs]
        rank = {j.job_id: k for k, j in enumerate(order)}
        caps = {n.name: n.gpus for n in snapshot.cluster.nodes}
        bad = bad_nodes_of(snapshot.unavailable, caps)
        nodes = _Nodes(
            {n: (0 if n in bad else g) for n, g in caps.items()},
            {n.name: i for i, n in enumerate(snapshot.cluster.nodes)},
            {n: {} for n in caps},
        )
        gpn = snapshot.cluster.max_gpus_per_node

        used: dict[str, int] = {}
        guaranteed: set[JobId] = set()
        placement: dict[JobId, Placement] = {}
        held = sorted(
            ((j, j.placement) for j in snapshot.jobs if j.is_running and j.placement is not None),
            key=lambda jp: (
                jp[0].first_start_time if jp[0].first_start_time is not None else snapshot.now,
                jp[0].job_id,
            ),
        )
        running = [j for j, _ in held]
        for j, pl in held:
            placement[j.job_id] = pl
            nodes.hold(j.job_id, pl)
            vc = self.config.vc_of_account(j.account)
            if vc is not None and used.get(vc, 0) + j.num_gpus <= self.quota[vc]:
                used[vc] = used.get(vc, 0) + j.num_gpus
                guaranteed.add(j.job_id)

        start: dict[JobId, Placement] = {}
        preempted: dict[JobId, str] = {}
        reasons: dict[JobId, str] = {}

        def release(jid: JobId) -> None:
            nodes.drop(jid, placement[jid])
            if jid in guaranteed:
                guaranteed.discard(jid)
                vc = self.config.vc_of_account(jobs[jid].account)
                used[vc] -= jobs[jid].num_gpus  # type: ignore[index]  # a guaranteed job's account has a VC

        for j in order:
            vc = self.config.vc_of_account(j.account)
            if j.is_running or vc is None:
                continue
            # Over quota: evict this tenant's lower-ranked guaranteed jobs, lowest first.
            evicted: list[JobId] = []
            if used.get(vc, 0) + j.num_gpus > self.quota[vc]:
                lower = [
                    x
                    for x in reversed(order)
                    if x.job_id in guaranteed
                    and rank[x.job_id] > rank[j.job_id]
                    and self.config.vc_of_account(x.account) == vc
                ]
                if self.quota[vc] - used.get(vc, 0) + sum(x.num_gpus for x in lower) < j.num_gpus:
                    reasons[j.job_id] = f"VC {vc}: {j.num_gpus} GPUs exceed its free quota"
                    continue
                for x in lower:
                    if used.get(vc, 0) + j.num_gpus <= self.quota[vc]:
                        break
                    release(x.job_id)
                    evicted.append(x.job_id)
            got = _place(j.num_gpus, gpn, nodes, lambda jid: jid not in guaranteed, rank)
            if got is None:
                for xid in evicted:  # put them back: nothing was gained
                    nodes.hold(xid, placement[xid])
                    guaranteed.add(xid)
                    used[vc] = used.get(vc, 0) + jobs[xid].num_gpus
                reasons[j.job_id] = (
                    f"VC {vc}: within quota but no {min(j.num_gpus, gpn)}-GPU affinity free (sharing anomaly)"
                )
                continue
            pl, victims = got
            for xid in evicted:
                preempted[xid] = f"preempted by higher-priority job {j.job_id} of VC {vc}"
            for v in victims:
                release(v)
                preempted[v] = f"opportunistic job preempted for guaranteed job {j.job_id} of VC {vc}"
            placement[j.job_id] = pl
            nodes.hold(j.job_id, pl)
            guaranteed.add(j.job_id)
            used[vc] = used.get(vc, 0) + j.num_gpus
            start[j.job_id] = pl

        for j in order:
            if j.is_running or j.job_id in start:
                continue
            got = _place(j.num_gpus, gpn, nodes, lambda jid: False, rank)
            if got is None:
                why = reasons.get(j.job_id)
                opp = f"not enough idle GPUs for {j.num_gpus} as an opportunistic job"
                reasons[j.job_id] = f"{why}; {opp}" if why else opp
                continue
            reasons.pop(j.job_id, None)
            placement[j.job_id] = got[0]
            nodes.hold(j.job_id, got[0])
            start[j.job_id] = got[0]

        reasons.update(preempted)
        return QuotaPlan(
            start=start,
            preempt=tuple(j.job_id for j in order if j.job_id in preempted),
            keep=tuple(j.job_id for j in order if j.is_running and j.job_id not in preempted),
            promote=ranked_plan.promote,
            queues=ranked_plan.queues,
            order=tuple(j.job_id for j in order),
            reasons=reasons,
            index=ranked_plan.index,
            guaranteed=frozenset(guaranteed & (set(start) | {j.job_id for j in running if j.job_id not in preempted})),
        )


def _place(
    gpus: int, gpn: int, nodes: _Nodes, preemptible, rank: dict[JobId, int]
) -> tuple[Placement, list[JobId]] | None:
    """Affinity placement on idle GPUs plus those of ``preemptible`` jobs, fewest victims, best fit.

    ``gpus // gpn`` whole nodes plus one node for the remainder; among nodes
    that can host a part, the one needing the fewest preemptions, then the
    fullest (best fit keeps whole nodes whole), then node order. Victims on a
    node are taken lowest rank first.
    """

    def option(n: str, need: int) -> tuple[int, int, int, list[JobId]] | None:
        idle = nodes.idle(n)
        if idle >= need:
            return (0, idle - need, nodes.order[n], [])
        victims: list[JobId] = []
        for jid in sorted((x for x in nodes.holders[n] if preemptible(x)), key=lambda x: -rank.get(x, 0)):
            victims.append(jid)
            idle += nodes.holders[n][jid]
            if idle >= need:
                return (len(victims), idle - need, nodes.order[n], victims)
        return None

    parts = [gpn] * (gpus // gpn) + ([gpus % gpn] if gpus % gpn else [])
    chosen: dict[str, int] = {}
    all_victims: list[JobId] = []
    for need in parts:
        best = None
        for n in nodes.cap:
            if n in chosen or nodes.cap[n] < need:
                continue
            o = option(n, need)
            if o is not None and (best is None or o[:3] < best[1][:3]):
                best = (n, o)
        if best is None:
            return None
        chosen[best[0]] = need
        all_victims += [v for v in best[1][3] if v not in all_victims]
    return Placement.of(sorted(chosen.items(), key=lambda t: nodes.order[t[0]])), all_victims
