"""The start step of a round: jobs the plan starts, on GPUs free now.

A start is all-or-nothing (Tiresias §3.1): a job whose GPUs are still held
by jobs being preempted waits for the next round; a job whose start Slurm
refuses is backed off (the wait doubles per failure in a row) so that its
promised GPUs do not sit idle and other jobs are not preempted for it again
and again. Sharing guests (sjf-bsbf, docs/sjf-bsbf.md §9) start on their
host's GPUs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from slurm_plugin.backends.base import SlurmNode, requeue_settle_wait
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import gpus, sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.enact import Enactor, fit_shape, priority_for
from slurm_plugin.controller.reconcile import Reconciled, with_gpu_ids
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import Placement, Plan
from teiresias.domain.plan import Sharing

log = logging.getLogger("teiresias.controller")

# After a failed start: wait this long before the next try, doubling per failure in a row.
START_BACKOFF_S = 60.0
START_BACKOFF_MAX_S = 900.0


class Starter:
    """Starts the plan's jobs and keeps the back-off of failed starts. The back-off
    is in memory only: after a restart a failing job is tried once more, then
    backed off again."""

    def __init__(self, config: ControllerConfig, store: StateStore, audit: AuditLog, *, dry_run: bool) -> None:
        self.config = config
        self.store = store
        self.audit = audit
        self.dry_run = dry_run
        # Failed starts: job -> (not before, failures in a row, why).
        self.backoff: dict[int, tuple[float, int, str]] = {}
        self._partition_nodes: dict[str, list[str]] = {}  # partition -> its nodes
        self.typed: frozenset[str] = frozenset()  # nodes with one gres Type per GPU (controller/gpus.py)
        self._gpus_on: dict[str, int] = {}
        self._busy: dict[str, set[int]] = {}  # GPU indices in use per node, this round's starts included
        # Starts a Plan.colocate job (the Controller sets it to Slicer.start_colocated under gandiva).
        self.colocate: Callable[..., bool] | None = None
        # Seconds from the last round until a start it left for Slurm's requeue settle may go.
        self.wake_in: float | None = None

    def waits(self) -> dict[int, tuple[float, str]]:
        """What reconcile needs: job -> (not before, why)."""
        return {j: (t, why) for j, (t, _, why) in self.backoff.items()}

    def observe(self, rec: Reconciled, slurm_nodes: list[SlurmNode]) -> None:
        """After reconcile: a job that runs, or is gone, starts afresh if it ever fails
        to start again; the partitions' nodes as Slurm shows them now."""
        self.backoff = {
            j: b
            for j, b in self.backoff.items()
            if j in rec.records and rec.records[j].phase in (Phase.PENDING, Phase.STARTING)
        }
        self._partition_nodes = {}
        for n in slurm_nodes:
            for p in n.partitions:
                self._partition_nodes.setdefault(p, []).append(n.name)
        self.typed = gpus.typed_nodes(slurm_nodes)
        self._gpus_on = {n.name: n.gpus for n in slurm_nodes}

    def pin(self, rec: Reconciled, r: JobRecord, placement: Placement, partner: int | None = None) -> Placement | str:
        """The GPUs of a shard job's start on nodes with one Type per GPU (controller/gpus.py):
        the plan's if it names them, its partner's (a guest, a time-slice join), the one its
        type binds it to (a requeued shard job), else the lowest idle ones. A reason string
        when it cannot start there now. Other jobs: ``placement`` unchanged."""
        sj = rec.slurm[r.job_id]
        if not sj.shards or not placement.nodes or not all(n in self.typed for n in placement.nodes):
            return placement
        if partner is not None:
            ps = rec.slurm.get(partner)
            pr = rec.records.get(partner)
            held = gpus.common_ids(with_gpu_ids(placement, ps)) if ps is not None and ps.gpu_ids else None
            if held is None and pr is not None and pr.planned is not None:
                held = gpus.common_ids(pr.planned)
            if held is None:
                return f"job {partner}'s GPU is not known yet (Slurm shows no GPU index for it); waits"
            want: tuple[int, ...] | None = held
        elif placement.has_ids:
            want = gpus.common_ids(placement)
            if want is None:
                return "chosen for different GPU indices on its nodes, which one typed shard request cannot ask"
        else:
            want = None
        if sj.shard_gpus and len(sj.shard_gpus) == 1:
            # Slurm keeps a shard job's type across requeues (backends/gputypes.py).
            if want is not None and want != sj.shard_gpus:
                return (
                    f"bound to GPU {sj.shard_gpus[0]} (Slurm keeps a shard job's GPU type once it ran), not"
                    f" GPU {','.join(map(str, want))} as chosen; waits"
                )
            want = sj.shard_gpus
        if want is None:
            got = gpus.lowest_idle(placement, self._gpus_on, self._busy)
            if got is None:
                return f"no idle GPU index common to {','.join(placement.nodes)}; waits"
        else:
            got = gpus.on_ids(placement, want)
            if partner is None:
                taken = [n for n in placement.nodes if set(want) & self._busy.get(n, set())]
                if taken:
                    return f"its GPU {','.join(map(str, want))} is in use on {','.join(taken)}; waits"
        for a in got.allocations:
            self._busy.setdefault(a.node, set()).update(a.gpu_ids)
        return got

    def start(self, enactor: Enactor, rec: Reconciled, plan: Plan, free: dict[str, int], now: float) -> None:
        """Starts whose GPUs are free now, in the plan's order; the others wait for
        preempted jobs to leave."""
        records = rec.records
        rank = {j: i for i, j in enumerate(plan.order)}
        self.wake_in = None
        self._busy = gpus.busy_gpus(rec.records, rec.slurm)
        for job_id, placement in sorted(plan.start.items(), key=lambda kv: rank.get(kv[0], 0)):
            r = records[job_id]
            sj = rec.slurm[job_id]
            wait = requeue_settle_wait(sj, time.time())
            if wait > 0:
                # slurmd refuses to start a job in the wall-clock second its previous
                # run's credential was revoked ("Job credential revoked": the job FAILS;
                # REQUEUE_SETTLE_MARGIN), so a just-requeued job waits, and the loop
                # runs the next round when it may go instead of a whole interval later.
                r.reason = f"requeued a moment ago; starts in {wait:.1f}s"
                self.wake_in = wait if self.wake_in is None else min(self.wake_in, wait)
                continue
            if job_id in plan.sharing:
                # A guest: its GPUs are its host's (not free), pinned by node (controller/sharing.py).
                self._start_guest(
                    enactor,
                    rec,
                    r,
                    plan.sharing[job_id],
                    placement,
                    priority_for(rank.get(job_id, 0), len(plan.order)),
                    free,
                    now,
                )
                continue
            if job_id in plan.colocate and self.colocate is not None:
                # Gandiva: on its partners' GPUs, through shards (controller/slicing.py).
                col = plan.colocate[job_id]
                if col.gpus:
                    # A node's time-sliced 1-GPU jobs: the plan names the GPU it runs on first,
                    # and it is bound to col.gpus (controller/gpus.py shard_request).
                    pinned = placement if placement.has_ids else "chosen without a GPU index; waits"
                elif col.partners:
                    pinned = self.pin(rec, r, placement, partner=int(col.partners[0]))
                else:
                    pinned = placement
                if isinstance(pinned, str):
                    r.reason = pinned
                    continue
                placement = pinned
                self.colocate(
                    enactor,
                    rec,
                    r,
                    plan.colocate[job_id],
                    placement,
                    priority_for(rank.get(job_id, 0), len(plan.order)),
                    free,
                    now,
                )
                continue
            allowed = [n for p in sj.partition.split(",") for n in self._partition_nodes.get(p, [])]
            nodes = rec.constraints.get(job_id)
            if nodes is not None and nodes.allowed is not None:
                allowed = [n for n in allowed if n in nodes.allowed]
            required = nodes.required if nodes is not None else frozenset()
            fitted = fit_shape(placement, sj, free, list(dict.fromkeys(allowed)), required)
            if fitted is None:
                r.reason = (
                    f"waiting for {sj.num_nodes} node(s) with {sj.gpus_per_node} free GPUs each"
                    f" (asked per node; its size is kept{'; ' + nodes.note if nodes is not None else ''})"
                )
                continue
            placement = fitted
            short = {
                a.node: a.gpus - free.get(a.node, 0) for a in placement.allocations if a.gpus > free.get(a.node, 0)
            }
            if short:
                r.reason = "waiting for preempted jobs to release " + ", ".join(
                    f"{g} GPU(s) on {n}" for n, g in short.items()
                )
                continue
            pinned = self.pin(rec, r, placement)
            if isinstance(pinned, str):
                r.reason = pinned
                continue
            placement = pinned
            for a in placement.allocations:
                free[a.node] -= a.gpus
            q = plan.queues.get(job_id, r.queue)
            act = enactor.start(
                r,
                placement,
                priority_for(rank.get(job_id, 0), len(plan.order)),
                sj,
                f"Q{q + 1}, placed on {','.join(placement.nodes)}",
                now,
            )
            if act.ok is False:
                self.back_off(r, f"start refused by Slurm ({act.detail.get('error', '?')})", now)

    def _start_guest(
        self,
        enactor: Enactor,
        rec: Reconciled,
        r: JobRecord,
        sh: Sharing,
        placement: Placement,
        priority: int,
        free: dict[str, int],
        now: float,
    ) -> None:
        """Plan.sharing: the pair decision in the audit log with its numbers, the guest's
        accumulate.json, then the usual start (node list, release) on the host's node.
        The host's batch never changes (the policy keeps a running job's batch), so the
        host is not restarted."""
        host_id = int(sh.partner)
        host, sj = rec.records.get(host_id), rec.slurm[r.job_id]
        typed = bool(placement.nodes) and all(n in self.typed for n in placement.nodes)
        why = sharing.cannot_share(
            sj, rec.slurm.get(host_id), host, placement, rec.records, rec.slurm, free, typed=typed
        )
        if why is not None:
            r.reason = why
            return
        pinned = self.pin(rec, r, placement, partner=host_id)
        if isinstance(pinned, str):
            r.reason = pinned
            return
        placement = pinned
        assert host is not None
        nums = sharing.audit_fields(sh)
        if not self.dry_run:
            try:
                written = sharing.write_accumulate(r, sh)
            except OSError as exc:
                self.back_off(r, f"cannot write its accumulate.json ({exc})", now)
                return
            if written is None and sh.accumulation > 1:
                r.reason = (
                    f"chosen to share job {host_id}'s GPU with {sh.accumulation} accumulation steps, but"
                    " it is not a tsbatch job (no control folder for accumulate.json)"
                )
                return
            self.audit.write(
                r.job_id,
                "share",
                f"shares job {host_id}'s GPU: the pair's average JCT"
                f" {sh.shared_avg_jct:.0f} s shared vs {sh.sequential_avg_jct:.0f} s one after"
                " the other",
                **nums,
            )
        r.shared_with, r.share_role, r.sub_batch, r.accumulation = host_id, "guest", sh.sub_batch, sh.accumulation
        host.shared_with, host.share_role = r.job_id, "host"
        r.shared_since = host.shared_since = now
        r.shared_until = host.shared_until = None
        if not self.dry_run:
            # The guest's side is saved with its start's journal row; the host's first, so a
            # crash in between cannot leave a guest whose host does not know it (end_pairs).
            with self.store.transaction():
                self.store.save_job(host)
        act = enactor.start(
            r,
            placement,
            priority,
            sj,
            f"shares job {host_id}'s GPU on"
            f" {','.join(placement.nodes)} (sub-batch {sh.sub_batch}, {sh.accumulation}"
            " accumulation steps)",
            now,
        )
        if act.ok is False:
            r.shared_with = host.shared_with = None
            r.share_role = host.share_role = ""
            r.shared_since = host.shared_since = None
            self.back_off(r, f"start refused by Slurm ({act.detail.get('error', '?')})", now)

    def unproven(self, rec: Reconciled) -> set[int]:
        """Jobs whose start failed and that Slurm has never started: until it has,
        nothing shows they can run where the controller puts them."""
        return {
            j
            for j in self.backoff
            if j in rec.records and rec.records[j].first_start_time is None and rec.records[j].phase is Phase.PENDING
        }

    def gate(self, rec: Reconciled, plan: Plan) -> Plan:
        """A job whose start failed and that never ran may start only on GPUs free
        now: it may preempt nobody until Slurm has started it once (a job Slurm
        could never start preempted another user's jobs once per back-off retry).
        Such a start that needs evicted GPUs is taken out of the plan with the
        preemptions the walk made for it ("preempted by higher-priority job J");
        the job waits, with its reason, for free GPUs."""
        unproven = self.unproven(rec)
        if not unproven or not plan.start:
            return plan
        free = rec.snapshot.free_gpus()
        rank = {j: i for i, j in enumerate(plan.order)}
        dropped: set[int] = set()
        for job_id, placement in sorted(plan.start.items(), key=lambda kv: rank.get(kv[0], 0)):
            on_free = all(a.gpus <= free.get(a.node, 0) for a in placement.allocations)
            if not on_free and job_id in unproven:
                dropped.add(job_id)
                continue
            for a in placement.allocations:
                free[a.node] = max(free.get(a.node, 0) - a.gpus, 0)
        if not dropped:
            return plan
        for gone in dropped:
            why = self.backoff[gone][2]
            rec.not_waiting[gone] = f"{why}; it waits for free GPUs and preempts nobody until Slurm has started it once"
        spared = tuple(
            j
            for j in plan.preempt
            if any(plan.reasons.get(j, "") == f"preempted by higher-priority job {d}" for d in dropped)
        )
        return replace(
            plan,
            start={j: p for j, p in plan.start.items() if j not in dropped},
            preempt=tuple(j for j in plan.preempt if j not in spared),
            keep=(*plan.keep, *spared),
        )

    def back_off(self, r: JobRecord, why: str, now: float) -> None:
        """A start that failed is not retried at once: the GPUs promised to it
        would sit idle, and other users' jobs could be preempted for it again
        and again. The wait doubles with each failure in a row."""
        if self.dry_run:
            return
        failures = self.backoff.get(r.job_id, (0.0, 0, ""))[1] + 1
        wait = min(START_BACKOFF_S * 2 ** (failures - 1), START_BACKOFF_MAX_S)
        self.backoff[r.job_id] = (now + wait, failures, why)
        r.reason = f"{why}; next try in {wait:.0f}s"
        log.warning("[job %d] start failed: %s; next try in %.0fs", r.job_id, why, wait)
        self.audit.write(r.job_id, "start-failed", why, retry_in_s=wait, failures=failures)
