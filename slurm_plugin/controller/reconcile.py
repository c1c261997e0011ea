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

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.backends.parse import FINISHED_STATES, HELD_REASONS, array_task_ids, base_state
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting, dependency, usage
from slurm_plugin.controller.accounting import Segment
from slurm_plugin.controller.constraints import NodeConstraint, never_fits_nodes, node_constraint
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Allocation, Cluster, Job, JobId, JobState, Node, Placement, Snapshot

RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})


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
    # job -> the nodes its owner lets it use (-w, -x, --constraint, a GPU type), for
    # jobs that restrict them (controller/constraints.py).
    constraints: dict[int, NodeConstraint] = field(default_factory=dict)
    # Jobs held by the controller that it no longer manages (no GPU asked any more, a
    # heterogeneous job, moved to another partition): job -> (Slurm target, why); the
    # round clears the mark and releases them, so Slurm runs them (Books.hand_back).
    to_release: dict[int, tuple[str, str]] = field(default_factory=dict)


def build_cluster(nodes: Iterable[SlurmNode], config: ControllerConfig) -> Cluster:
    """The nodes of the managed partitions, grouped by the configured switches."""
    chosen = [n for n in nodes if any(config.manages(p) for p in n.partitions)]
    return Cluster(tuple(Node(n.name, config.switch_of(n.name), n.gpus, n.cpus, n.mem_mb / 1024.0) for n in chosen))


def running_placement(sj: SlurmJob, rec: JobRecord) -> Placement:
    """GPUs per node of a running job: the plan we gave it when Slurm honoured it,
    else what it asked per node, else an even split; with the GPU indices Slurm
    gave it (``gres_detail``'s IDX) where they match the count."""
    return with_gpu_ids(_running_counts(sj, rec), sj)


def _running_counts(sj: SlurmJob, rec: JobRecord) -> Placement:
    nodes = sj.nodes or (rec.planned.nodes if rec.planned else ())
    if rec.planned and set(rec.planned.nodes) == set(nodes) and rec.planned.num_gpus == sj.gpus:
        return rec.planned
    if not nodes:
        return Placement(())
    if sj.gpus_per_node and sj.gpus_per_node * len(nodes) == sj.gpus:
        return Placement.of([(n, sj.gpus_per_node) for n in nodes])
    share, extra = divmod(sj.gpus, len(nodes))
    return Placement.of([(n, share + (1 if i < extra else 0)) for i, n in enumerate(nodes)])


def with_gpu_ids(p: Placement, sj: SlurmJob) -> Placement:
    """``p`` naming the GPUs Slurm gave the job on each node, where it gave as many as
    ``p`` counts (a job holding a shard of several GPUs of a node, a Gandiva floater,
    runs on one of them: the controller's state says which, controller/slicing.py)."""
    if not sj.gpu_ids:
        return p
    allocs = []
    for a in p.allocations:
        ids = sj.gpu_ids_on(a.node)
        allocs.append(Allocation(a.node, a.gpus, ids) if len(ids) == a.gpus else a)
    return Placement(tuple(allocs))


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
        user_nodes=",".join(sj.required_nodes),
    )


def same_job(rec: JobRecord, sj: SlurmJob) -> bool:
    """Is Slurm's job ``sj`` the job ``rec`` was kept for? Job ids restart on a
    new or reset cluster, so the id alone does not say. Slurm's SubmitTime
    does, except that every requeue (the controller's, Slurm's own at a node
    failure or a time limit, an admin's ``scontrol requeue``, the job's own)
    moves it to the requeue time, one restart later than the time it replaces:
    a later SubmitTime whose restart count is above the one the recorded time
    belonged to (``submit_restart``) is the same job. The count alone is not
    enough: Slurm counts the restart at the requeue and moves SubmitTime only
    once the run has finished completing, so a round that sees the job
    COMPLETING already has the new count beside the old time."""
    if not sj.submit_time:
        return True  # nothing to compare with
    seen = rec.slurm_submit_time
    if seen is None:
        # Written before records kept Slurm's last SubmitTime: the first one, or any requeue since.
        return abs(sj.submit_time - rec.submit_time) < 1.0 or 0 < rec.restart_count <= sj.restart_count
    if abs(sj.submit_time - seen) < 1.0:
        return True
    if rec.submit_restart is None:
        # Written before submit_restart: the count seen last may have come with the old time.
        return sj.submit_time > seen and sj.restart_count >= max(rec.restart_count, 1)
    return sj.submit_time > seen and sj.restart_count > rec.submit_restart


def note_submit_time(rec: JobRecord, sj: SlurmJob, state: str) -> None:
    """Keep Slurm's last SubmitTime and the restart count it belongs to (see same_job).
    A job in transit (COMPLETING after a requeue) may show a count its time is not
    yet of; a time that moved, or one seen in a settled state, belongs to its count."""
    if not sj.submit_time:
        return
    moved = rec.slurm_submit_time is not None and abs(sj.submit_time - rec.slurm_submit_time) >= 1.0
    settled = state == "PENDING" or state in RUNNING_STATES or state in FINISHED_STATES
    if moved or settled:
        rec.submit_restart = sj.restart_count
    elif rec.submit_restart is None:
        # First seen in transit: its time may be the run's before the requeue being counted.
        rec.submit_restart = max(sj.restart_count - 1, 0)
    rec.slurm_submit_time = float(sj.submit_time)


def managed_jobs(config: ControllerConfig, slurm_jobs: Iterable[SlurmJob]) -> dict[int, SlurmJob]:
    """The jobs the controller schedules: GPU jobs of a managed partition. CPU-only
    jobs are Slurm's (job_submit.lua does not hold them either), and so are the
    components of a heterogeneous job, which job_submit.lua refuses (a component
    cannot be started alone; they used to wait for ever)."""
    return {
        sj.job_id: sj for sj in slurm_jobs if sj.gpus > 0 and config.manages(sj.partition) and sj.het_job_id is None
    }


def outside_why(config: ControllerConfig, sj: SlurmJob) -> str:
    """Why a job Slurm has is not (or no longer) the controller's to schedule."""
    if sj.het_job_id is not None:
        return (
            f"a component of heterogeneous job {sj.het_job_id}, which teiresias does not schedule"
            " (job_submit.lua refuses them)"
        )
    if not config.manages(sj.partition):
        return f"in partition {sj.partition}, which teiresias does not manage"
    return "it asks for no GPU (any more)"


def handed_back(
    config: ControllerConfig,
    records: Mapping[int, JobRecord],
    slurm_jobs: Iterable[SlurmJob],
    managed: Mapping[int, SlurmJob],
) -> dict[int, tuple[str, str]]:
    """Jobs the controller holds (its mark, no person's hold) that it no longer
    manages: held, nobody would ever release them (a held job whose GPU request
    was dropped stayed held for ever). Array meta records are not among them."""
    out: dict[int, tuple[str, str]] = {}
    for sj in slurm_jobs:
        if sj.job_id in managed or (sj.array_tasks and sj.array_task_id is None):
            continue
        if base_state(sj.state) != "PENDING" or not sj.held_by_teiresias:
            continue
        if config.manages(sj.partition) or sj.job_id in records:
            out[sj.job_id] = (sj.target, f"{outside_why(config, sj)}: released to Slurm")
    return out


def hold_throttled_tasks(out: Reconciled) -> None:
    """An array's ``%N`` throttle: Slurm starts no more than N of its tasks at once,
    so a task released beyond it sits pending on GPUs promised to it (~28 s
    measured, until a sibling ended). The tasks past the room left are not
    waiting; the lowest task ids get the room, as Slurm would start them."""
    busy: dict[int, int] = {}
    waiting: dict[int, list[SlurmJob]] = {}
    for job_id, sj in out.slurm.items():
        if not sj.array_max_tasks or sj.array_job_id is None or job_id not in out.records:
            continue
        rec, state = out.records[job_id], base_state(sj.state)
        if not rec.active:
            continue
        if state != "PENDING" or rec.phase is Phase.STARTING:
            busy[sj.array_job_id] = busy.get(sj.array_job_id, 0) + 1
        elif job_id not in out.not_waiting and job_id not in out.to_hold:
            waiting.setdefault(sj.array_job_id, []).append(sj)
    for array, tasks in waiting.items():
        limit = tasks[0].array_max_tasks
        room = max(limit - busy.get(array, 0), 0)
        for sj in sorted(tasks, key=lambda t: t.array_task_id or 0)[room:]:
            out.not_waiting[sj.job_id] = (
                f"array {array} runs {busy.get(array, 0)} task(s), its limit (%{limit}): waits for one to end"
            )


def note_user_nodes(rec: JobRecord, sj: SlurmJob, state: str) -> None:
    """A held job's ReqNodeList that is neither the user's list as known nor the
    controller's last pin was changed by a person (``scontrol update nodelist=``):
    it is the user's list from now on."""
    if rec.user_nodes is None or state != "PENDING" or rec.phase is Phase.STARTING:
        return
    shown = ",".join(sj.required_nodes)
    if shown not in (rec.user_nodes, rec.pinned_nodes):
        rec.user_nodes = shown


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
    managed = managed_jobs(config, slurm_jobs)
    out = Reconciled(snapshot=Snapshot(now, cluster, ()), records={}, slurm=managed)
    out.to_release = handed_back(config, records, slurm_jobs, managed)
    # An array's meta record (its tasks not split off yet) is no job for the policy:
    # releasing it would release every task. Its tasks are split off (loop), each a job.
    for sj in [s for s in managed.values() if s.array_tasks and s.array_task_id is None]:
        del managed[sj.job_id]
        if base_state(sj.state) == "PENDING":
            if not sj.held_by_teiresias and not sj.held:
                out.unheld_arrays.append(sj.job_id)  # held whole first: no task may start on its own
            out.to_split += [f"{sj.array_job_id or sj.job_id}_{t}" for t in array_task_ids(sj.array_tasks)]

    released = {
        j: sj.priority
        for j, sj in managed.items()
        if (r := records.get(j)) is not None and r.phase is Phase.STARTING and base_state(sj.state) == "PENDING"
    }
    polled = dependency.Jobs(slurm_jobs) if any("(unfulfilled)" in sj.dependency for sj in managed.values()) else None
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
        note_submit_time(rec, sj, state)
        note_user_nodes(rec, sj, state)
        if (
            state == "PENDING"  # only a job to be placed needs them
            and (sj.excluded_nodes or sj.features or sj.gpu_type or rec.user_nodes)
            and (c := node_constraint(sj, rec.user_nodes, slurm_nodes)).any
        ):
            out.constraints[job_id] = c
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
                if never_starts(sj, rec, slurm_nodes):
                    out.start_failed[job_id] = f"Slurm cannot start it on {on} ({sj.state_reason})"
                elif now - rec.phase_since > config.preemption.start_timeout_seconds and behind(sj, released):
                    # Passed over for a job released above it that Slurm has not started:
                    # that one's timeout is what counts; this one gets its own once it is gone.
                    rec.phase_since = now
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
            elif why := not_waiting_reason(
                sj, rec, slurm_nodes, now, (backoff or {}).get(job_id), out.constraints.get(job_id), polled
            ):
                out.not_waiting[job_id] = why
        else:
            out.in_transit.append(job_id)

    # Active records Slurm no longer knows: gone between two rounds (purged,
    # or cancelled and forgotten while the controller was away). A job Slurm
    # still has, outside the managed set now (moved to another partition, or
    # a partition no longer managed), has not vanished: its record is kept as
    # it is, so its attained service is there if it comes back.
    # Such a job is not waiting for GPUs: it says why (it was ranked and counted as
    # "waiting for 1 GPUs" after `scontrol update gres=gpu:0`), and it ends with
    # its own final state instead of VANISHED once Slurm purges it.
    known = {sj.job_id: sj for sj in slurm_jobs if sj.job_id not in managed} if records else {}
    for job_id, rec in records.items():
        if rec.active and job_id not in managed and job_id not in out.replaced:
            other = known.get(job_id)
            if other is not None and same_job(rec, other):
                out.records[job_id] = rec
                out.not_waiting[job_id] = f"left to Slurm: {outside_why(config, other)}"
                if base_state(other.state) in FINISHED_STATES:
                    accounting.close_run(rec, float(other.end_time or now), "slurm")
                    _set_phase(rec, Phase.FINISHED, now)
                    rec.final_state = base_state(other.state)
                    rec.end_time = float(other.end_time or now)
                    out.notes.append((job_id, f"ended ({rec.final_state}) as a job teiresias does not manage"))
                continue
            _close_vanished(rec, now)
            out.records[job_id] = rec
            out.vanished.append(job_id)

    hold_throttled_tasks(out)
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


def never_starts(sj: SlurmJob, rec: JobRecord, nodes: list[SlurmNode]) -> bool:
    """Does the pending reason of a job the controller released say that waiting will not
    cure it? ``ReqNodeNotAvail`` does only when one of its nodes is down or drained: Slurm
    gives it too when a job above it in the same scheduling pass could not start on those
    nodes (22.05 job_scheduler.c takes a failed job's required nodes out of the pass for
    every job below it), and the next pass, once that job starts or is held, starts it
    (the soak, seed 22: an `afterok` job refused this way at every start, never run)."""
    if sj.state_reason not in NEVER_STARTS:
        return False
    if sj.state_reason != "ReqNodeNotAvail":
        return True
    usable = {n.name for n in nodes if n.usable}
    pinned = sj.required_nodes or (rec.planned.nodes if rec.planned else ())
    return not pinned or not set(pinned) <= usable


# What Slurm 22.05 shows on a job its scheduling pass left behind a higher-priority job it
# could not start: the whole partition stopped (``Priority``) or that job's nodes taken
# out of the pass (``ReqNodeNotAvail``, never_starts).
PASSED_OVER = frozenset({"Priority", "ReqNodeNotAvail"})


def behind(sj: SlurmJob, released: Mapping[int, int]) -> bool:
    """Is a job the controller released waiting in Slurm behind another job it released
    with a higher priority that Slurm has not started either (``released``: job -> Slurm
    priority of the released jobs still pending)? Slurm starts it at its next pass once
    that job starts or is held again; on its own it would wait for the backfill pass
    (bf_interval, 30 s), past the start timeout (the soak, seed 23: j16, j20 held again
    while the job above them waited)."""
    return sj.state_reason in PASSED_OVER and any(p > sj.priority for j, p in released.items() if j != sj.job_id)


def _user_of_hold(sj: SlurmJob) -> str:
    if (uid := sj.person_hold) is not None:
        # Written by job_submit.lua: a hold on a job the controller already held.
        return f"uid {uid} (`scontrol hold` while the controller held it)"
    return "an admin" if sj.state_reason == "JobHeldAdmin" else "its owner"


def not_waiting_reason(
    sj: SlurmJob,
    rec: JobRecord,
    nodes: list[SlurmNode],
    now: float,
    backoff: tuple[float, str] | None = None,
    constraint: NodeConstraint | None = None,
    polled: dependency.Jobs | None = None,
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
    if "(unfulfilled)" in sj.dependency and (
        polled is None or not dependency.dependency_met(sj.dependency, polled, now)
    ):
        # Met by what the poll shows: waiting for GPUs, though Slurm says so only at its
        # next periodic pass for a held job (controller/dependency.py).
        return f"waiting for its dependency ({sj.dependency})"
    if sj.eligible_time and sj.eligible_time > now and sj.restart_count == 0 and rec.first_start_time is None:
        return f"begins at {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(sj.eligible_time))} (--begin)"
    if (never := never_fits(sj, nodes)) is not None:
        return never
    if constraint is not None and (never := never_fits_nodes(sj, constraint, nodes)) is not None:
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
    rec: JobRecord,
    now: float,
    state: JobState,
    placement: Placement | None,
    nodes: NodeConstraint | None = None,
    *,
    time_limit_minutes: int | None = None,
    shareable: bool = True,
    gpus_per_node: int = 0,
) -> Job:
    """The policy's view of a job. ``state_since``: the open run's start while it runs, the
    time it went back to waiting after a run (a preemption) while it waits; ``time_limit``:
    Slurm's TimeLimit in seconds (None when unlimited), which gittins reads as information;
    ``shareable``: a shard job (Job.shareable); ``gpus_per_node``: the per-node GPUs of a
    job asked per node (Job.gpus_per_node, 0 otherwise)."""
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
        nodes_allowed=nodes.allowed if nodes is not None else None,
        nodes_required=nodes.required if nodes is not None else frozenset(),
        shareable=shareable,
        gpus_per_node=gpus_per_node,
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
        if not rec.active or job_id in rec_out.in_transit or job_id not in rec_out.slurm:
            continue  # (not in slurm: a job left to Slurm, see reconcile's last loop)
        sj = rec_out.slurm[job_id]
        state = base_state(sj.state)
        shards = bool(sj.shards)  # only a shard job's GPU can be shared (Job.shareable)
        if (
            rec.share_role == "guest"
            and rec.shared_with is not None
            and (state in RUNNING_STATES or (rec.phase is Phase.STARTING and job_id not in rec_out.to_hold))
        ):
            # A guest runs on a share of its host's GPUs, which the host's placement
            # counts already: counted twice, free_gpus would lose them (the simulator
            # likewise counts a pair's GPUs as the host's).
            jobs.append(
                to_policy_job(
                    rec,
                    now,
                    JobState.RUNNING,
                    Placement(()),
                    time_limit_minutes=sj.time_limit_minutes,
                    shareable=shards,
                )
            )
        elif state in RUNNING_STATES:
            placement = running_placement(sj, rec)
            for a in placement.allocations:
                slurm_running[a.node] = slurm_running.get(a.node, 0) + a.gpus
            jobs.append(
                to_policy_job(
                    rec, now, JobState.RUNNING, placement, time_limit_minutes=sj.time_limit_minutes, shareable=shards
                )
            )
        elif rec.phase is Phase.STARTING and rec.planned is not None and job_id not in rec_out.to_hold:
            jobs.append(
                to_policy_job(
                    rec, now, JobState.RUNNING, rec.planned, time_limit_minutes=sj.time_limit_minutes, shareable=shards
                )
            )
        elif state == "PENDING" and job_id not in rec_out.not_waiting:
            # A job asked per node keeps its shape in the plan too (enact.fit_shape starts it
            # in no other): a plan that split it otherwise preempted for a start Slurm refuses.
            per = sj.gpus_per_node or 0
            per = per if per and per * max(sj.num_nodes, 1) == rec.gpus else 0
            jobs.append(
                to_policy_job(
                    rec,
                    now,
                    JobState.PENDING,
                    None,
                    rec_out.constraints.get(job_id),
                    time_limit_minutes=sj.time_limit_minutes,
                    shareable=shards,
                    gpus_per_node=per,
                )
            )
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
