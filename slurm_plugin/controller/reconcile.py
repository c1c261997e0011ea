"""Slurm's view + the controller's records -> the Snapshot a policy decides on.

Pure: given the stored records, one poll of Slurm (jobs and nodes) and
``now``, it updates the records (phases, run segments) and returns the
Snapshot plus what the round must do before or besides the policy (hold jobs
that escaped the submission hold, re-hold jobs Slurm did not start in time,
record finished jobs). The caller persists and enacts.

How Slurm states map to the policy's two states:
- RUNNING / CONFIGURING -> RUNNING, placed where Slurm runs it. SUSPENDED too:
  a job the gandiva policy suspended keeps its GPUs (controller/slicing.py
  marks it ``Job.suspended``); no other policy suspends jobs.
- PENDING and held, or PENDING after our requeue -> PENDING.
- Released by us but not started yet (phase STARTING) -> RUNNING on its planned
  placement: those GPUs are promised, the next round must not give them away.
- COMPLETING, REQUEUED, ... (in transit) -> left out of the
  snapshot; their GPUs are still busy in Slurm and so count as unavailable.
- COMPLETED, FAILED, CANCELLED, TIMEOUT, ... -> the job leaves the queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.backends.parse import FINISHED_STATES, HELD_REASONS, array_task_ids
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting, usage
from slurm_plugin.controller.accounting import Segment
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Cluster, Job, JobId, JobState, Node, Placement, Snapshot

RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})


@lru_cache(maxsize=256)
def base_state(state: str) -> str:
    """Slurm may report ``PENDING,REQUEUED`` or ``CANCELLED by 0``: keep the base state."""
    return state.replace("+", ",").split(",")[0].split(" ")[0].strip().upper()


@dataclass
class Reconciled:
    snapshot: Snapshot
    records: dict[int, JobRecord]  # every record touched (active and just finished)
    slurm: dict[int, SlurmJob]  # managed jobs as Slurm shows them
    segments: list[tuple[int, Segment]] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    to_hold: dict[int, str] = field(default_factory=dict)  # job -> why it must be held now
    notes: list[tuple[int, str]] = field(default_factory=list)
    in_transit: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)  # jobs seen for the first time
    # Pending jobs that are not waiting for GPUs (a dependency, a begin time, a
    # user's hold, a size no partition can give, a failed start's back-off):
    # left out of the snapshot, so nothing is promised or preempted for them.
    not_waiting: dict[int, str] = field(default_factory=dict)
    start_failed: dict[int, str] = field(default_factory=dict)  # released, and Slurm did not start it
    to_split: list[str] = field(default_factory=list)  # array tasks ("A_T") still in the meta record
    unheld_arrays: list[int] = field(default_factory=list)  # meta records pending without a hold
    # job -> the closed record of an earlier job with that id (a new or reset cluster
    # reuses ids): the caller archives it before the new record is saved.
    replaced: dict[int, JobRecord] = field(default_factory=dict)


def build_cluster(nodes: Iterable[SlurmNode], config: ControllerConfig) -> Cluster:
    """The nodes of the managed partitions, grouped by the configured switches."""
    chosen = [n for n in nodes if any(config.manages(p) for p in n.partitions)]
    return Cluster(tuple(Node(n.name, config.switch_of(n.name), n.gpus, n.cpus, n.mem_mb / 1024.0) for n in chosen))


def running_placement(sj: SlurmJob, rec: JobRecord) -> Placement:
    """GPUs per node of a running job: the plan we gave it when Slurm honoured it,
    else what it asked per node, else an even split (Slurm's own choice is not in squeue)."""
    nodes = sj.nodes or (rec.planned.nodes if rec.planned else ())
    if rec.planned and set(rec.planned.nodes) == set(nodes) and rec.planned.num_gpus == sj.gpus:
        return rec.planned
    if not nodes:
        return Placement(())
    if sj.gpus_per_node and sj.gpus_per_node * len(nodes) == sj.gpus:
        return Placement.of([(n, sj.gpus_per_node) for n in nodes])
    share, extra = divmod(sj.gpus, len(nodes))
    return Placement.of([(n, share + (1 if i < extra else 0)) for i, n in enumerate(nodes)])


def _new_record(sj: SlurmJob, now: float) -> JobRecord:
    return JobRecord(
        job_id=sj.job_id,
        user=sj.user,
        account=sj.account,
        partition=sj.partition,
        name=sj.name,
        comment=sj.comment,
        gpus=sj.gpus,
        submit_time=float(sj.submit_time or now),
        phase=Phase.PENDING,
        phase_since=now,
        restart_count=sj.restart_count,
        slurm_submit_time=float(sj.submit_time) if sj.submit_time else None,
    )


def same_job(rec: JobRecord, sj: SlurmJob) -> bool:
    """Is Slurm's job ``sj`` the job ``rec`` was kept for? Job ids restart on a
    new or reset cluster, so the id alone does not say. Slurm's SubmitTime
    does, except that a requeue moves it to the requeue time and counts a
    restart: a later SubmitTime with more restarts is the same job."""
    if not sj.submit_time:
        return True  # nothing to compare with
    seen = rec.slurm_submit_time
    if seen is None:
        # Written before records kept Slurm's last SubmitTime: the first one, or any requeue since.
        return abs(sj.submit_time - rec.submit_time) < 1.0 or 0 < rec.restart_count <= sj.restart_count
    if abs(sj.submit_time - seen) < 1.0:
        return True
    return sj.submit_time > seen and sj.restart_count > rec.restart_count


def _close_vanished(rec: JobRecord, now: float) -> None:
    accounting.close_run(rec, rec.last_running_seen or now, "estimated")
    _set_phase(rec, Phase.FINISHED, now)
    rec.final_state = "VANISHED"
    rec.end_time = rec.last_running_seen or now


def _set_phase(rec: JobRecord, phase: Phase, now: float) -> None:
    if rec.phase is not phase:
        rec.phase = phase
        rec.phase_since = now


def reconcile(
    config: ControllerConfig,
    records: Mapping[int, JobRecord],
    slurm_jobs: Iterable[SlurmJob],
    slurm_nodes: Iterable[SlurmNode],
    now: float,
    backoff: Mapping[int, tuple[float, str]] | None = None,
) -> Reconciled:
    """Update the records from one poll of Slurm and build the round's Snapshot.
    ``backoff``: job -> (not before, why) for jobs whose start failed lately."""
    slurm_nodes = list(slurm_nodes)
    slurm_jobs = list(slurm_jobs)
    cluster = build_cluster(slurm_nodes, config)
    # CPU-only jobs are Slurm's to schedule (job_submit.lua does not hold them either).
    managed = {sj.job_id: sj for sj in slurm_jobs if sj.gpus > 0 and config.manages(sj.partition)}
    out = Reconciled(snapshot=Snapshot(now, cluster, ()), records={}, slurm=managed)
    # An array's meta record (its tasks not split off yet) is no job for the policy:
    # releasing it would release every task. Its tasks are split off (loop), each a job.
    for sj in [s for s in managed.values() if s.array_tasks and s.array_task_id is None]:
        del managed[sj.job_id]
        if base_state(sj.state) == "PENDING":
            if not sj.held_by_teiresias and not sj.held:
                out.unheld_arrays.append(sj.job_id)  # held whole first: no task may start on its own
            out.to_split += [f"{sj.array_job_id or sj.job_id}_{t}" for t in array_task_ids(sj.array_tasks)]

    for job_id, sj in managed.items():
        rec = records.get(job_id)
        state = base_state(sj.state)
        if rec is not None and not same_job(rec, sj):
            # Another job under a known id: the recorded one is gone; this one starts afresh.
            if rec.active:
                _close_vanished(rec, now)
            out.replaced[job_id] = rec
            rec = None
        if rec is None:
            if state in FINISHED_STATES:
                continue  # ended before we ever saw it: not ours to account
            rec = _new_record(sj, now)
            out.created.append(job_id)
        elif not rec.active:
            continue
        out.records[job_id] = rec
        if sj.submit_time:
            rec.slurm_submit_time = float(sj.submit_time)
        rec.comment = sj.comment or rec.comment
        rec.gpus = sj.gpus or rec.gpus
        running = state in RUNNING_STATES
        if not running and rec.usage_time is not None:
            usage.set_usage(rec, None)  # figures of a run that is over
        segs, notes = accounting.observe_run(rec, sj, now, running)
        out.segments += [(job_id, s) for s in segs]
        out.notes += [(job_id, n) for n in notes]

        if state in FINISHED_STATES:
            _set_phase(rec, Phase.FINISHED, now)
            rec.final_state = state
            rec.end_time = float(sj.end_time) if sj.end_time else now
            out.finished.append(job_id)
        elif running:
            if rec.phase is Phase.PENDING and not rec.planned:
                out.notes.append((job_id, "started without the controller (submitted before the hold?); now managed"))
            if rec.phase is not Phase.PREEMPTING or (
                rec.signal_restart is not None and sj.restart_count > rec.signal_restart
            ):
                _set_phase(rec, Phase.RUNNING, now)
        elif state == "PENDING":
            requeued_itself = False
            if (
                rec.phase is Phase.PREEMPTING
                and rec.signal_restart is not None
                and sj.restart_count > rec.signal_restart
            ):
                # Signalled, and it requeued itself (a job that checkpoints on its own
                # --signal: submitit, Lightning, NeMo): the preemption is done.
                rec.preemptions += 1
                rec.signal_time = rec.signal_restart = None
                rec.planned = None
                requeued_itself = True
                out.notes.append((job_id, "requeued itself after the preemption signal"))
            if rec.phase in (Phase.RUNNING, Phase.PREEMPTING) and rec.run_start is None:
                # Requeued (by us, by itself at its time limit, or by Slurm): waiting again.
                _set_phase(rec, Phase.PENDING, now)
            if rec.phase is Phase.STARTING and sj.state_reason in HELD_REASONS and not sj.held_by_teiresias:
                # Its owner or an admin held it after the controller released it: theirs now.
                # (Not priority 0 alone: Slurm sets that itself, e.g. with BadConstraints.)
                _set_phase(rec, Phase.PENDING, now)
                rec.planned = None
            if rec.phase is Phase.STARTING:
                on = ",".join(rec.planned.nodes) if rec.planned else "?"
                if sj.state_reason in NEVER_STARTS:
                    out.start_failed[job_id] = f"Slurm cannot start it on {on} ({sj.state_reason})"
                elif now - rec.phase_since > config.preemption.start_timeout_seconds:
                    out.start_failed[job_id] = (
                        f"Slurm did not start it on {on} within"
                        f" {config.preemption.start_timeout_seconds:g}s ({sj.state_reason})"
                    )
                if job_id in out.start_failed:
                    out.to_hold[job_id] = out.start_failed[job_id]
                    out.not_waiting[job_id] = out.start_failed[job_id]
            elif not sj.held:
                out.to_hold[job_id] = (
                    "requeued itself after the preemption signal; held for the policy"
                    if requeued_itself
                    else "pending without a hold (outside the controller's control)"
                )
            elif why := not_waiting_reason(sj, rec, slurm_nodes, now, (backoff or {}).get(job_id)):
                out.not_waiting[job_id] = why
        else:
            out.in_transit.append(job_id)

    # Active records Slurm no longer knows: gone between two rounds (purged,
    # or cancelled and forgotten while the controller was away). A job Slurm
    # still has, outside the managed set now (moved to another partition, or
    # a partition no longer managed), has not vanished: its record is kept as
    # it is, so its attained service is there if it comes back.
    known = {sj.job_id: sj for sj in slurm_jobs if sj.job_id not in managed} if records else {}
    for job_id, rec in records.items():
        if rec.active and job_id not in managed and job_id not in out.replaced:
            other = known.get(job_id)
            if other is not None and same_job(rec, other):
                continue
            _close_vanished(rec, now)
            out.records[job_id] = rec
            out.vanished.append(job_id)

    end_pairs(out, records, now)
    out.snapshot = build_snapshot(cluster, out, slurm_nodes, now)
    return out


# Pending reasons of a released job that waiting will not cure: the start is
# given up at once (and backed off) instead of after start_timeout_seconds.
NEVER_STARTS = frozenset(
    {
        "BadConstraints",
        "DependencyNeverSatisfied",
        "Dependency",
        "PartitionNodeLimit",
        "PartitionConfig",
        "InvalidQOS",
        "InvalidAccount",
        "ReqNodeNotAvail",
        "NodeDown",
        "PartitionDown",
        "PartitionInactive",
        "JobLaunchFailure",
    }
)


def _user_of_hold(sj: SlurmJob) -> str:
    return "an admin" if sj.state_reason == "JobHeldAdmin" else "its owner"


def not_waiting_reason(
    sj: SlurmJob, rec: JobRecord, nodes: list[SlurmNode], now: float, backoff: tuple[float, str] | None = None
) -> str | None:
    """Why a held pending job is not waiting for GPUs, or None when it is.

    Only the project's own hold is ever released: a hold by the owner
    (``sbatch -H``, ``scontrol hold``) or an admin stays. A begin time is the
    user's unless the job has run before (then it is the ~120 s Slurm sets at
    a requeue, cleared at the start)."""
    if not sj.held_by_teiresias:
        return f"held by {_user_of_hold(sj)} ({sj.state_reason}); `scontrol release {sj.target}` lets it queue"
    if "(failed)" in sj.dependency:
        return (
            f"its dependency can never be satisfied ({sj.dependency}); cancel it, or change it with"
            f" `scontrol update jobid={sj.target} dependency=...`"
        )
    if "(unfulfilled)" in sj.dependency:
        return f"waiting for its dependency ({sj.dependency})"
    if sj.eligible_time and sj.eligible_time > now and sj.restart_count == 0 and rec.first_start_time is None:
        return f"begins at {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(sj.eligible_time))} (--begin)"
    if (never := never_fits(sj, nodes)) is not None:
        return never
    if backoff is not None and backoff[0] > now:
        return f"{backoff[1]}; next try in {backoff[0] - now:.0f}s"
    return None


def never_fits(sj: SlurmJob, nodes: list[SlurmNode]) -> str | None:
    """Why no node shape of the job's partition can ever give the job its size, or None."""
    wanted = set(sj.partition.split(","))  # sbatch -p a,b: any of them
    part = [n for n in nodes if wanted & set(n.partitions)]
    if not part:
        return None  # nothing known of its nodes: nothing to say
    if sj.gpus_per_node:
        able = sum(1 for n in part if n.gpus >= sj.gpus_per_node)
        if able < sj.num_nodes:
            return (
                f"asks for {sj.num_nodes} node(s) with {sj.gpus_per_node} GPUs each; partition"
                f" {sj.partition} has {able} such node(s): it can never start (cancel it and resubmit)"
            )
        return None
    total = sum(n.gpus for n in part)
    if sj.gpus > total:
        return (
            f"asks for {sj.gpus} GPUs; partition {sj.partition} has {total} in all: it can never start"
            f" (cancel it and resubmit with at most {total})"
        )
    return None


def to_policy_job(
    rec: JobRecord, now: float, state: JobState, placement: Placement | None, time_limit_minutes: int | None = None
) -> Job:
    """The policy's view of a job. ``state_since``: the open run's start while it runs, the
    time it went back to waiting after a run (a preemption) while it waits; ``time_limit``:
    Slurm's TimeLimit in seconds (None when unlimited), which gittins reads as information."""
    ran_before = rec.first_start_time is not None
    return Job(
        job_id=JobId(rec.job_id),
        num_gpus=rec.gpus,
        submit_time=rec.submit_time,
        user=rec.user,
        account=rec.account,
        model_name=rec.name,
        state=state,
        first_start_time=rec.first_start_time,
        state_since=rec.run_start if state is JobState.RUNNING else (rec.phase_since if ran_before else None),
        time_limit=time_limit_minutes * 60.0 if time_limit_minutes else None,
        executed_time=accounting.executed_time(rec, now),
        waiting_time=accounting.waiting_time(rec, now),
        total_executed_time=accounting.total_executed(rec, now),
        queue_index=rec.queue,
        preemptions=rec.preemptions,
        skew=rec.skew,
        placement=placement,
        usage=usage.of_record(rec) if state is JobState.RUNNING else None,
        shared_with=JobId(rec.shared_with) if rec.shared_with is not None else None,
        sub_batch=rec.sub_batch,
        accumulation=rec.accumulation,
    )


def end_pairs(out: Reconciled, records: Mapping[int, JobRecord], now: float) -> None:
    """A pair lasts while both jobs run (or are being started). When one ends,
    is requeued or vanishes, the other runs alone on the GPU from now on; it
    keeps its sub-batch until its next restart (docs/sjf-bsbf.md §3)."""

    def live(r: JobRecord | None) -> bool:
        return r is not None and r.phase not in (Phase.PENDING, Phase.FINISHED)

    for job_id, rec in out.records.items():
        if rec.shared_with is None:
            continue
        partner = out.records.get(rec.shared_with) or records.get(rec.shared_with)
        if live(rec) and live(partner) and partner is not None and partner.shared_with == job_id:
            continue
        out.notes.append(
            (
                job_id,
                f"no longer shares GPUs with job {rec.shared_with}"
                f" ({'it' if not live(rec) else 'the partner'} stopped running)",
            )
        )
        rec.shared_with, rec.share_role = None, ""
        ended = [x.end_time for x in (rec, partner) if x is not None and not live(x) and x.end_time is not None]
        rec.shared_until = min(ended) if ended else now  # Slurm's end time beats the round's


def build_snapshot(cluster: Cluster, rec_out: Reconciled, slurm_nodes: list[SlurmNode], now: float) -> Snapshot:
    jobs: list[Job] = []
    slurm_running: dict[str, int] = {}
    for job_id, rec in rec_out.records.items():
        if not rec.active or job_id in rec_out.in_transit:
            continue
        sj = rec_out.slurm[job_id]
        state = base_state(sj.state)
        if (
            rec.share_role == "guest"
            and rec.shared_with is not None
            and (state in RUNNING_STATES or (rec.phase is Phase.STARTING and job_id not in rec_out.to_hold))
        ):
            # A guest runs on a share of its host's GPUs, which the host's placement
            # counts already: counted twice, free_gpus would lose them (the simulator
            # likewise counts a pair's GPUs as the host's).
            jobs.append(to_policy_job(rec, now, JobState.RUNNING, Placement(()), sj.time_limit_minutes))
        elif state in RUNNING_STATES:
            placement = running_placement(sj, rec)
            for a in placement.allocations:
                slurm_running[a.node] = slurm_running.get(a.node, 0) + a.gpus
            jobs.append(to_policy_job(rec, now, JobState.RUNNING, placement, sj.time_limit_minutes))
        elif rec.phase is Phase.STARTING and rec.planned is not None and job_id not in rec_out.to_hold:
            jobs.append(to_policy_job(rec, now, JobState.RUNNING, rec.planned, sj.time_limit_minutes))
        elif state == "PENDING" and job_id not in rec_out.not_waiting:
            jobs.append(to_policy_job(rec, now, JobState.PENDING, None, sj.time_limit_minutes))
    # GPUs managed jobs may not use: all of a node Slurm will not schedule on,
    # else whatever Slurm counts as used beyond our running jobs (other
    # partitions' jobs, jobs in transit).
    unavailable: dict[str, int] = {}
    for n in slurm_nodes:
        if n.name not in cluster:
            continue
        if not n.usable:
            unavailable[n.name] = n.gpus
        else:
            other = max(n.gpus_used - slurm_running.get(n.name, 0), 0)
            if other:
                unavailable[n.name] = min(other, n.gpus)
    jobs.sort(key=lambda j: j.job_id)
    return Snapshot(now, cluster, tuple(jobs), unavailable)
