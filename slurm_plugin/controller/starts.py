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

from slurm_plugin.backends.base import SlurmNode, requeue_settle_wait
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.enact import Enactor, fit_shape, priority_for
from slurm_plugin.controller.reconcile import Reconciled
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

    def start(self, enactor: Enactor, rec: Reconciled, plan: Plan, free: dict[str, int], now: float) -> None:
        """Starts whose GPUs are free now, in the plan's order; the others wait for
        preempted jobs to leave."""
        records = rec.records
        rank = {j: i for i, j in enumerate(plan.order)}
        self.wake_in = None
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
            fitted = fit_shape(placement, sj, free, list(dict.fromkeys(allowed)))
            if fitted is None:
                r.reason = (
                    f"waiting for {sj.num_nodes} node(s) with {sj.gpus_per_node} free GPUs each"
                    " (asked per node; its size is kept)"
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
        why = sharing.cannot_share(sj, rec.slurm.get(host_id), host, placement, rec.records, rec.slurm, free)
        if why is not None:
            r.reason = why
            return
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
