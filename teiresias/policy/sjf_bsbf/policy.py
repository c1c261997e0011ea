"""SJF-BSBF and its baseline SJF-FFS (docs/sjf-bsbf.md §5).

Non-preemptive: running jobs are always kept. Waiting jobs in shortest-job
order each try, in turn:

1. exclusive idle GPUs (the placement policy, as every other policy);
2. else the GPUs of one running job that shares with nobody yet (at most
   two jobs per GPU, eq. 9 with K = 2):
   - ``sjf-bsbf``: every such host is scored by Algorithm 2 (best sub-batch,
     Theorem 1's share-or-wait); among the hosts where sharing lowers the
     pair's average JCT, the one with the lowest shared average wins;
   - ``sjf-ffs``: the first host (node order) on which some sub-batch fits
     memory, shared at once with the largest such sub-batch.

A guest shares exactly one host and takes a subset of its GPUs (the
placement policy picks them among the host's), so each pair is the two-job
system of Theorem 1. The paper's Algorithm 1 may gather GPUs from several
hosts; we do not (docs/sjf-bsbf.md says why).

Job length: ``Job.remaining_time`` where the owner knows it (the simulator;
the paper assumes known durations). Without it, the expected remaining
GPU-time under the Gittins/LAS service distribution given the attained
service, divided by the job's GPUs; without either, a ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teiresias.domain import Job, JobId, Placement, Plan, Snapshot
from teiresias.domain.plan import Sharing
from teiresias.errors import ConfigError
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.sjf_bsbf.model import SharingModel
from teiresias.policy.sjf_bsbf.pair import PairDecision, decide_pair


class SjfBsbfPolicy:
    """Shortest job first with best sharing benefit first (the paper's Algorithm 1)."""

    name = "sjf-bsbf"
    preemptive = False
    first_fit = False

    def __init__(self, placement: PlacementPolicy, model: SharingModel | None = None, distribution: Any = None) -> None:
        self.placement = placement
        self.model = model if model is not None else SharingModel()
        self.distribution = distribution

    # -- job length ---------------------------------------------------------
    def remaining(self, job: Job) -> float:
        """Seconds of work left when running alone at the job's current batch."""
        r = job.remaining_time
        if r is None:
            d = self.distribution
            if d is None:
                raise ConfigError(
                    f"policy {self.name!r} needs each job's duration or a GPU-time distribution, but job"
                    f" {job.job_id} has no duration; give --samples/-g FILE (the Gittins/LAS estimate)"
                )
            a = job.attained_gpu_seconds
            above = [s - a for s in d.samples if s > a]
            r = (sum(above) / len(above) / max(job.num_gpus, 1)) if above else 0.0
        if job.sub_batch:
            r *= self.model.profile(job.model_name).iteration_time(job.sub_batch)
        return r

    def key(self, job: Job) -> tuple[Any, ...]:
        return (self.remaining(job), job.submit_time, job.job_id)

    # -- the round ----------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Plan:
        jobs = list(snapshot.jobs)
        running = [(j, j.placement) for j in jobs if j.is_running and j.placement is not None]
        pending = sorted((j for j in jobs if not j.is_running), key=self.key)
        free = {n: max(g, 0) for n, g in snapshot.free_gpus().items()}
        node_order = {n.name: i for i, n in enumerate(snapshot.cluster.nodes)}
        # Hosts: running jobs alone on their GPUs, on nodes with nothing unavailable (a draining node
        # takes no new job, not even a guest), first-fit order = their first node, then id.
        placed_hosts = [
            (h, p)
            for h, p in running
            if h.shared_with is None and not any(snapshot.unavailable.get(a.node, 0) for a in p.allocations)
        ]
        placed_hosts.sort(key=lambda hp: (min(node_order.get(n, 0) for n in hp[1].nodes), hp[0].job_id))
        hosts = [h for h, _ in placed_hosts]
        start: dict[JobId, Placement] = {}
        sharing: dict[JobId, Sharing] = {}
        reasons: dict[JobId, str] = {}
        for job in pending:
            if job.num_gpus <= 0:
                reasons[job.job_id] = "asks for no GPU"
                continue
            pl = self.placement.place(job, free, snapshot.cluster)
            if pl is not None:
                start[job.job_id] = pl
                for a in pl.allocations:
                    free[a.node] -= a.gpus
                continue
            got = self._share(job, hosts, snapshot)
            if isinstance(got, str):
                reasons[job.job_id] = got
                continue
            host, pl, dec = got
            start[job.job_id] = pl
            sharing[job.job_id] = Sharing(
                partner=host.job_id,
                sub_batch=dec.sub_batch,
                accumulation=dec.accumulation,
                slowdown=dec.xi_guest,
                partner_slowdown=dec.xi_host,
                alone_slowdown=dec.guest_slowdown_alone,
                shared_avg_jct=dec.shared.average,
                sequential_avg_jct=dec.sequential.average,
            )
            hosts.remove(host)
        order = tuple(j.job_id for j in sorted((j for j, _ in running), key=self.key)) + tuple(
            j.job_id for j in pending
        )
        return Plan(
            start=start,
            keep=tuple(j.job_id for j in jobs if j.is_running),
            queues={j.job_id: 0 for j in jobs},
            order=order,
            reasons=reasons,
            sharing=sharing,
        )

    def _share(self, job: Job, hosts: list[Job], snapshot: Snapshot) -> tuple[Job, Placement, PairDecision] | str:
        """The host, GPUs and settings for ``job`` as a guest, or why it waits."""
        best: tuple[Job, Placement, PairDecision] | None = None
        why = f"waits for {job.num_gpus} free GPU(s): no running job alone on enough GPUs to share"
        for host in hosts:
            assert host.placement is not None
            on: Mapping[str, int] = {a.node: a.gpus for a in host.placement.allocations}
            pl = self.placement.place(job, on, snapshot.cluster)
            if pl is None:
                continue
            dec = decide_pair(
                self.model,
                host.model_name,
                host.sub_batch,
                self.remaining(host),
                job.model_name,
                self.remaining(job),
                first_fit=self.first_fit,
            )
            if dec is None:
                why = f"waits: no sub-batch of it fits GPU memory beside job {host.job_id}"
                continue
            if self.first_fit:
                return host, pl, dec
            if not dec.share:
                why = (
                    f"waits for job {host.job_id}: sharing its GPUs would raise the pair's average JCT"
                    f" to {dec.shared.average:.0f} s from {dec.sequential.average:.0f} s one after the other"
                )
                continue
            if best is None or dec.shared.average < best[2].shared.average:
                best = (host, pl, dec)
        return best if best is not None else why


class SjfFfsPolicy(SjfBsbfPolicy):
    """SJF with first-fit sharing: the paper's baseline (§VI-A4), sharing whenever memory allows."""

    name = "sjf-ffs"
    first_fit = True
