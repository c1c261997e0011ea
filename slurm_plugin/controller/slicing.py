"""Enacting Gandiva's decisions on Slurm 22.05 (docs/gandiva.md, "Mechanisms on Slurm").

The gandiva policy (teiresias/policy/gandiva/) decides on a Snapshot whose
jobs carry Gandiva's state; this module builds that state from Slurm and its
own store entry, and turns the Plan's new decisions into Slurm calls:

- ``suspend`` / ``resume``: ``scontrol suspend`` / ``resume`` (the job keeps
  its shards; the hooks park at a mini-batch boundary, wrappers/hooks/suspend.py).
  Slurm's job state SUSPENDED is the truth for ``Job.suspended``.
- ``colocate``: the started job asks for shards (``--gres=shard:N``). On nodes
  with one gres Type per GPU it is released with the types of the GPUs it is
  bound to (controller/gpus.py): a 1-GPU job joining an over-subscribed node a
  shard of each of the node's GPUs (``Colocation.gpus``), and ``gpu.json`` in
  its job dir names the one it runs on (wrappers/hooks/device.py). On untyped
  nodes it is pinned by node only, where its partners' GPU is the one GPU with
  shards left (Slurm's first fit, the rule of the SJF-BSBF guest start).
- ``devices``: such a job runs on another of its GPUs from now: ``gpu.json``
  is rewritten before the resume that goes with it (or, running, the hooks
  switch at their next step boundary).
- ``pack`` / ``unpack``: the group's mode; the suspend/resume lists of the same
  plan make every member run (pack) or one at a time (unpack). The numbers
  behind the decision (``Plan.notes``) go to the audit log.
- ``migrate`` / ``resize``: two-phase preemption (checkpoint, requeue held),
  then the job is started again on the target (resize: at the new GPU count,
  ``scontrol update gres=gpu:N``), resuming from its checkpoint. While that is
  under way the target GPUs are reported unavailable, and the requeued job as
  RUNNING there, so no other start takes them.

What the controller keeps per job (slices, migrations, slice start, group,
packed, a migration's target) is one JSON entry in the state store's meta
table (``META_KEY``), like themis' leases; Slurm's state wins where both know.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from slurm_plugin.backends.base import SlurmBackend, SlurmJob, requeue_settle_wait
from slurm_plugin.controller import channel, sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.reconcile import Reconciled, base_state
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias import jobfiles
from teiresias.domain import Allocation, Job, JobId, JobState, JobUsage, Placement, Plan
from teiresias.domain.plan import Colocation
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable

log = logging.getLogger("teiresias.controller")

META_KEY = "gandiva"
# Ended jobs whose slices and migrations are kept (for `teiresias queue --all`).
KEEP_ENDED = 500


@dataclass
class Member:
    """What the controller keeps about one job between rounds."""

    slice_since: float | None = None
    slices: int = 0
    migrations: int = 0
    group: list[int] = field(default_factory=list)  # colocated partners
    packed: bool = False
    pack_failed: bool = False  # an unpack undid a packing of it
    pack_failed_with: list[int] = field(default_factory=list)  # ... with these jobs: not packed with them again
    device: int | None = None  # the GPU a job bound to several runs on (gpu.json)
    # A migration or resize under way: where it restarts, and which action it is.
    target: list[list[Any]] | None = None  # [[node, gpus], ...]
    target_kind: str = ""  # "migrate", "grow" or "shrink"
    target_since: float | None = None

    def target_placement(self) -> Placement | None:
        if not self.target:
            return None
        return Placement(
            tuple(
                Allocation(str(t[0]), int(t[1]), tuple(int(i) for i in t[2]) if len(t) > 2 else ()) for t in self.target
            )
        )


def load(text: str | None) -> dict[int, Member]:
    """The stored entry; {} when absent or unreadable (the state is rebuilt from Slurm as jobs go on)."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {int(k): Member(**v) for k, v in raw.items()}
    except (ValueError, TypeError):
        log.warning("gandiva state in the store is unreadable: starting from Slurm's view only")
        return {}


def dump(members: dict[int, Member]) -> str:
    return json.dumps({str(k): asdict(v) for k, v in sorted(members.items())}, separators=(",", ":"))


def elastic_of(rec: JobRecord) -> tuple[int, int] | None:
    text = dict(rec.files.items).get("elastic", "")
    if not text:
        return None
    try:
        e = jobfiles.parse_elastic(text)
    except ValueError:
        return None
    return (e.min_gpus, e.max_gpus)


def step_time_of(rec: JobRecord, restart: int) -> float | None:
    """The current run's median seconds per mini-batch from the hooks' runs.jsonl (§3.2 introspection)."""
    jd = channel.folder(rec)
    if jd is None:
        return None
    run = jobfiles.read_runs(jd).get(restart)
    return run.median_step_s if run is not None else None


def busy_of(rec: JobRecord, restart: int) -> float | None:
    """The run's busy share (percent of step time outside the DataLoader) from its last
    runs.jsonl record: the hooks' step-rate measure of utilisation without NVML."""
    jd = channel.folder(rec)
    if jd is None:
        return None
    lines = sharing.run_lines(jd, restart)
    return next((x.busy for x in reversed(lines) if x.busy is not None), None)


def write_device(rec: JobRecord, gpu: int, now: float) -> bool:
    """``gpu.json`` naming Slurm's GPU ``gpu`` in the folder the controller writes the job's
    settings to (channel.folder_for_job); False for a job without one (not a tsbatch job, or
    no place the controller may trust: it cannot switch GPUs). OSError when it cannot be written."""
    jd = channel.folder_for_job(rec)
    if jd is None:
        return False
    jobfiles.write_device(jd, jobfiles.Device(gpu, now))
    return True


def window_step_time(rec: JobRecord, restart: int, since: float | None) -> float | None:
    """Seconds per mini-batch since ``since`` (the last resume, start, pack or unpack):
    from the first and last runs.jsonl records of the run written after it, whose step
    counts are cumulative, so no suspension lies inside the window. None with fewer
    than two such records (the hooks write one every TEIRESIAS_RUNS_EVERY seconds)."""
    jd = channel.folder(rec)
    if jd is None:
        return None
    lines = [x for x in sharing.run_lines(jd, restart) if since is None or x.time >= since]
    if len(lines) < 2 or lines[-1].steps <= lines[0].steps or lines[-1].time <= lines[0].time:
        return None
    return (lines[-1].time - lines[0].time) / (lines[-1].steps - lines[0].steps)


class Slicer:
    """Gandiva's half of a round: annotate the snapshot before the policy, enact after it."""

    def __init__(self, backend: SlurmBackend, audit: AuditLog, *, dry_run: bool) -> None:
        self.backend = backend
        self.audit = audit
        self.dry_run = dry_run
        self.members: dict[int, Member] = {}
        self.solo: dict[int, float] = {}  # job -> step time measured while it ran alone
        self._busy: dict[str, tuple[int, float]] = {}  # node -> (busy GPUs, since)
        self.started_moves: set[int] = set()  # moved jobs released and not running yet

    def m(self, job_id: int) -> Member:
        return self.members.setdefault(job_id, Member())

    # ------------------------------------------------------------ before the policy
    def annotate(self, rec: Reconciled, now: float) -> None:
        """Put Gandiva's state on the snapshot's jobs (rec.snapshot is replaced)."""
        active = {j for j, r in rec.records.items() if r.active}
        # Ended jobs keep their counts for `teiresias queue --all` (the most recent ones only).
        ended = sorted(j for j in self.members if j not in active)
        for j in ended[:-KEEP_ENDED] if len(ended) > KEEP_ENDED else ():
            del self.members[j]
        for j in ended[-KEEP_ENDED:]:
            m = self.members[j]
            m.group, m.packed, m.target, m.target_kind, m.target_since = [], False, None, "", None
        in_snapshot = {j.job_id for j in rec.snapshot.jobs}
        unavailable = dict(rec.snapshot.unavailable)
        jobs: list[Job] = []
        for job in rec.snapshot.jobs:
            r, sj = rec.records[job.job_id], rec.slurm[job.job_id]
            m = self.members.get(job.job_id, Member())
            target = m.target_placement()
            if target is not None and job.state is JobState.PENDING:
                # Requeued for its migration/resize: its GPUs are the target's, promised to it.
                job = replace(job, state=JobState.RUNNING, placement=target, num_gpus=target.num_gpus)
            elif target is not None:
                # Still checkpointing: the target stays reserved (the policy chose idle GPUs).
                for a in target.allocations:
                    unavailable[a.node] = unavailable.get(a.node, 0) + a.gpus
            suspended = base_state(sj.state) == "SUSPENDED"
            partners = tuple(JobId(p) for p in m.group if p in in_snapshot)
            bound = sj.shard_gpus
            if len(bound) > 1 and job.placement is not None and job.placement.num_nodes == 1:
                # Bound to several GPUs of its node: it holds none of its own; it runs on m.device.
                dev = m.device if m.device in bound else bound[0]
                job = replace(job, placement=Placement((Allocation(job.placement.nodes[0], 0, (dev,)),)))
            usage = job.usage
            if job.is_running:
                busy = busy_of(r, sj.restart_count)
                if busy is not None:
                    usage = (
                        replace(usage, busy=busy)
                        if usage is not None
                        else JobUsage(now, None, None, None, 0.0, 0, busy=busy)
                    )
            step = None
            if job.is_running and not suspended:
                # §3.2 introspection: the mini-batch time in the current mode (alone, one
                # slice of a sliced group, or packed); alone, the run's median will do.
                step = window_step_time(r, sj.restart_count, m.slice_since)
                if step is None and not partners:
                    step = step_time_of(r, sj.restart_count)
                mine = self._device(job.job_id, rec)
                others_run = any(
                    base_state(rec.slurm[p].state) != "SUSPENDED" and self._device(int(p), rec) == mine
                    for p in partners
                    if p in rec.slurm
                )
                if step is not None and not others_run and not m.packed:
                    self.solo[job.job_id] = step
            jobs.append(
                replace(
                    job,
                    suspended=suspended,
                    slice_since=m.slice_since,
                    slices=m.slices,
                    migrations=m.migrations,
                    colocated_with=partners,
                    packed=m.packed and bool(partners),
                    pack_failed=m.pack_failed,
                    pack_failed_with=tuple(JobId(p) for p in m.pack_failed_with),
                    bound_gpus=bound,
                    usage=usage,
                    elastic=elastic_of(r),
                    step_time=step,
                    solo_step_time=self.solo.get(job.job_id),
                )
            )
        snap = rec.snapshot
        for node in snap.cluster.nodes:
            busy = sum(
                a.gpus
                for j in jobs
                if j.is_running and j.placement is not None
                for a in j.placement.allocations
                if a.node == node.name
            )
            if self._busy.get(node.name, (-1, 0.0))[0] != busy:
                self._busy[node.name] = (busy, now)
        rec.snapshot = replace(
            snap,
            jobs=tuple(jobs),
            unavailable=unavailable,
            idle_since={n: since for n, (_, since) in self._busy.items()},
        )

    # ------------------------------------------------------------ after the policy
    def resume_before_preempt(self, rec: Reconciled, plan: Plan, now: float) -> None:
        """A suspended job cancelled or requeued gets no SIGTERM, so it cannot checkpoint
        (../shared/notes/gpu-sharing-on-slurm.md §4): resume it before its preemption signal."""
        for job_id in (*plan.preempt, *plan.migrate, *plan.resize):
            sj = rec.slurm.get(job_id)
            if sj is not None and base_state(sj.state) == "SUSPENDED":
                self._call(
                    job_id, "resume", "resumed so that it can checkpoint before it is moved", now, self.backend.resume
                )

    def enact(self, rec: Reconciled, plan: Plan, now: float) -> None:
        """suspend, resume, pack, unpack; migrations and resizes are recorded (the
        Preempter signals them, ``restart_moved`` starts them on their target)."""
        notes = plan.notes
        for job_id, to in plan.devices.items():
            # Before the resume that goes with it: the hooks read gpu.json when they continue.
            gpu = to.allocations[0].gpu_ids[0]
            m = self.m(job_id)
            if m.device == gpu:
                continue
            r = rec.records[job_id]
            try:
                ok = self.dry_run or write_device(r, gpu, now)
            except OSError as exc:
                log.warning("[job %d] gpu.json not written: %s", job_id, exc)
                ok = False
            if ok:
                m.device = gpu
                self._audit(job_id, "device", notes.get(job_id, f"runs on GPU {gpu}"), gpu=gpu, node=to.nodes[0])
        for job_id in plan.suspend:
            if base_state(rec.slurm[job_id].state) == "SUSPENDED":
                continue
            if self._call(job_id, "suspend", notes.get(job_id, "its slice is over"), now, self.backend.suspend):
                m = self.m(job_id)
                m.slices += 1
                m.slice_since = now
        for job_id in plan.resume:
            if base_state(rec.slurm[job_id].state) != "SUSPENDED":
                continue
            if self._call(job_id, "resume", notes.get(job_id, "its turn"), now, self.backend.resume):
                self.m(job_id).slice_since = now
        for action, jobs, packed in (("pack", plan.pack, True), ("unpack", plan.unpack, False)):
            for job_id in jobs:
                m = self.m(job_id)
                m.packed = packed
                m.pack_failed |= not packed
                if not packed:
                    m.pack_failed_with = sorted({*m.pack_failed_with, *(int(o) for o in jobs if o != job_id)})
                m.slice_since = now  # the group's throughput is judged a slice after the mode changed
                self._audit(job_id, action, notes.get(job_id, ""), group=sorted(self.m(job_id).group))
        for kind, moves in (("migrate", plan.migrate), ("resize", plan.resize)):
            for job_id, placement in moves.items():
                r = rec.records[job_id]
                if self.m(job_id).target is not None:
                    continue  # already on its way (the policy still sees it where it was)
                if kind == "resize":
                    kind_now = "grow" if placement.num_gpus > r.gpus else "shrink"
                    sj = rec.slurm[job_id]
                    if not sj.gpus_per_node or sj.shards:
                        # Only a per-node GPU count can be changed on a pending job (notes §6).
                        self._audit(
                            job_id,
                            f"{kind_now}-refused",
                            "a resize needs the job to ask --gres=gpu:N (GPUs per node); it keeps its size",
                        )
                        continue
                else:
                    kind_now = "migrate"
                m = self.m(job_id)
                m.target = [[a.node, a.gpus, list(a.gpu_ids)] for a in placement.allocations]
                m.target_kind, m.target_since = kind_now, now
                self._leave_group(job_id)
                self._audit(
                    job_id,
                    kind_now,
                    notes.get(job_id, ""),
                    to=list(placement.nodes),
                    gpus=placement.num_gpus,
                    from_gpus=r.gpus,
                )

    def moving(self, plan: Plan) -> Plan:
        """The plan the Preempter runs for migrations and resizes: checkpoint and requeue them."""
        extra = tuple(
            j
            for j in (*plan.migrate, *plan.resize)
            if j not in plan.preempt and j in self.members and self.members[j].target is not None
        )
        reasons = {
            **plan.reasons,
            **{j: _prefixed(self.members[j].target_kind, plan.notes.get(j, "")) for j in extra if j in self.members},
        }
        return replace(plan, preempt=tuple(plan.preempt) + extra, reasons=reasons)

    def start_colocated(
        self,
        enactor: Any,
        rec: Reconciled,
        r: JobRecord,
        col: Colocation,
        placement: Placement,
        priority: int,
        free: dict[str, int],
        now: float,
    ) -> bool:
        """Start ``r`` on its partners' GPUs (Plan.colocate); False when it must wait (r.reason says why)."""
        sj = rec.slurm[r.job_id]
        why = self._cannot_colocate(rec, sj, col, placement, free)
        if why is not None:
            r.reason = why
            return False
        bind = tuple(col.gpus) if len(col.gpus) > 1 and placement.has_ids else ()
        first = placement.allocations[0].gpu_ids[0] if placement.has_ids else None
        if bind and first is not None and not self.dry_run:
            # It holds a shard of each GPU of bind and runs on the one gpu.json names.
            try:
                if not write_device(r, first, now):
                    r.reason = (
                        "chosen to time-slice the GPUs of its node, which needs a tsbatch job (gpu.json in"
                        " its job directory says which GPU it runs on); waits"
                    )
                    return False
            except OSError as exc:
                r.reason = f"cannot write its gpu.json ({exc}); waits"
                return False
        mode = "time-sliced" if col.mode == "slice" else "packed"
        act = enactor.start(
            r,
            placement,
            priority,
            sj,
            f"joins job(s) {','.join(map(str, col.partners))} on {','.join(placement.nodes)}"
            f" ({mode}){': ' + col.reason if col.reason else ''}",
            now,
            bind=bind,
        )
        if act.ok is False:
            return False
        m = self.m(r.job_id)
        m.device = first
        m.group = sorted({int(p) for p in col.partners})
        m.packed = col.mode == "pack"
        m.slice_since = now
        for p in col.partners:
            pm = self.m(int(p))
            pm.group = sorted({*pm.group, r.job_id, *(int(q) for q in col.partners if q != p)})
            pm.packed = m.packed
        return True

    def started(self, rec: Reconciled, plan: Plan, now: float) -> None:
        """Jobs the plan started alone (and Slurm was asked to start) begin their first slice now."""
        for job_id in plan.start:
            r = rec.records.get(job_id)
            if job_id not in plan.colocate and r is not None and r.phase is Phase.STARTING:
                m = self.m(job_id)
                m.slice_since = now
                m.group = []

    def restart_moved(self, enactor: Any, rec: Reconciled, now: float) -> None:
        """Requeued migrations/resizes: start them on their target (resize: at the new size)."""
        for job_id, seen in rec.slurm.items():
            r = rec.records.get(job_id)
            if (
                r is not None
                and r.phase is Phase.STARTING
                and seen.restart_count
                and job_id in self.started_moves
                and base_state(seen.state) == "PENDING"
                and seen.state_reason == "BeginTime"
                and not self.dry_run
            ):
                # Slurm ignores starttime=now while the previous run is COMPLETING (notes §6): again.
                self.backend.clear_begin_time(job_id)
        self.started_moves &= {j for j, r in rec.records.items() if r.phase is Phase.STARTING}
        for job_id, m in list(self.members.items()):
            target = m.target_placement()
            r = rec.records.get(job_id)
            sj = rec.slurm.get(job_id)
            if target is None or r is None or sj is None or r.phase is not Phase.PENDING:
                continue
            if not r.preemptions or requeue_settle_wait(sj, time.time()) > 0:
                continue  # not moved yet, or inside its requeue second (REQUEUE_SETTLE_MARGIN)
            per_node = {a.gpus for a in target.allocations}
            # A job that asked per node (--gres=gpu:N) gets N on each node of its node list:
            # a resize, or a move onto fewer nodes, changes N (Slurm accepts it while pending).
            if sj.gpus_per_node and not sj.shards and per_node != {sj.gpus_per_node} and not self.dry_run:
                if len(per_node) != 1:
                    r.reason = f"cannot {m.target_kind} to an uneven placement {target} (it asks GPUs per node)"
                    continue
                try:
                    self.backend.set_gres(job_id, f"gpu:{per_node.pop()}")
                except SlurmUnreachable:
                    raise
                except (JobVanished, SlurmError) as exc:
                    self._audit(job_id, f"{m.target_kind}-failed", str(exc))
                    m.target = None
                    continue
                r.gpus = target.num_gpus
            if len(sj.shard_gpus) > 1 and target.has_ids and not self.dry_run:
                # Bound to several GPUs: it runs on the target's (gpu.json, read when it starts).
                try:
                    if write_device(r, target.allocations[0].gpu_ids[0], now):
                        m.device = target.allocations[0].gpu_ids[0]
                except OSError as exc:
                    log.warning("[job %d] gpu.json not written: %s", job_id, exc)
            act = enactor.start(
                r,
                target,
                1,
                sj,
                f"{m.target_kind} to {','.join(target.nodes)}"
                f" ({target.num_gpus} GPU(s)) after {now - (m.target_since or now):.1f}s",
                now,
            )
            if act.ok is not False:
                self.started_moves.add(job_id)
                if m.target_kind == "migrate":
                    m.migrations += 1
                m.target, m.target_kind, m.target_since = None, "", None
                m.slice_since = now

    # ------------------------------------------------------------ helpers
    def _device(self, job_id: int, rec: Reconciled) -> tuple[str, int] | None:
        """(node, GPU) a 1-GPU job runs on: Slurm's index for a job bound to one GPU, the
        controller's choice for a job bound to several; None when not known (any GPU)."""
        sj = rec.slurm.get(job_id)
        if sj is None or not sj.nodes:
            return None
        node = sj.nodes[0]
        if len(sj.shard_gpus) > 1:
            m = self.members.get(job_id)
            dev = m.device if m is not None and m.device is not None else sj.shard_gpus[0]
            return node, dev
        ids = sj.gpu_ids_on(node)
        return (node, ids[0]) if len(ids) == 1 else None

    def _cannot_colocate(
        self, rec: Reconciled, sj: SlurmJob, col: Colocation, placement: Placement, free: dict[str, int]
    ) -> str | None:
        hint = "submit the jobs with --gres=shard:N so that Slurm can put them on one GPU"
        if not sj.shards:
            return (
                f"chosen to join job(s) {','.join(map(str, col.partners))} on their GPUs, but it asks for"
                f" whole GPUs; {hint}"
            )
        if any(a.gpus > 1 for a in placement.allocations):
            return (
                "chosen to join a group on more than one GPU per node: Slurm 22.05 takes a job's shards on"
                " a node from one GPU"
            )
        group = {int(p) for p in col.partners}
        for p in group:
            pr, ps = rec.records.get(p), rec.slurm.get(p)
            if pr is None or ps is None or pr.phase is not Phase.RUNNING:
                return f"chosen to join job {p}, which is not running (not started yet, or stopping)"
            if not ps.shards:
                return f"chosen to join job {p}, which holds its GPUs whole (--gres=gpu); {hint}"
        if placement.has_ids:
            return None  # released on its partners' GPU by its gres type (controller/gpus.py)
        for node in placement.nodes:
            if free.get(node, 0) > 0:
                return (
                    f"chosen to join job(s) {','.join(map(str, sorted(group)))} on {node}, which has an idle"
                    " GPU: Slurm would give it that one (first fit by index)"
                )
            for job_id, other in rec.slurm.items():
                r = rec.records.get(job_id)
                if (
                    job_id not in group
                    and job_id != sj.job_id
                    and other.shards
                    and node in other.nodes
                    and r is not None
                    and r.phase in (Phase.RUNNING, Phase.STARTING)
                ):
                    return (
                        f"chosen to join job(s) {','.join(map(str, sorted(group)))} on {node}, where job"
                        f" {job_id} holds another GPU's shards: Slurm, not the controller, would pick the GPU"
                    )
        return None

    def _leave_group(self, job_id: int) -> None:
        m = self.m(job_id)
        for p in m.group:
            if p in self.members:
                self.members[p].group = [q for q in self.members[p].group if q != job_id]
        m.group, m.packed = [], False

    def _call(self, job_id: int, action: str, why: str, now: float, call: Any) -> bool:
        if self.dry_run:
            return False
        try:
            call(job_id)
        except SlurmUnreachable:
            raise
        except (JobVanished, SlurmError) as exc:
            log.warning("[job %d] %s failed: %s", job_id, action, exc)
            self._audit(job_id, f"{action}-failed", str(exc))
            return False
        self._audit(job_id, action, why)
        log.info("[job %d] %s: %s", job_id, action, why)
        return True

    def _audit(self, job_id: int, action: str, why: str, **fields: Any) -> None:
        if not self.dry_run:
            self.audit.write(job_id, action, why, **fields)


def _prefixed(kind: str, note: str) -> str:
    """The audit reason of a move: the policy's note, said to be a move (once)."""
    if not note:
        return kind
    return note if note.startswith(kind) else f"{kind}: {note}"
