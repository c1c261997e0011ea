"""The controller's side of Themis (docs/themis.md "Live"): what the policy needs carried between
rounds, and what `teiresias queue` shows.

The policy is pure; its state between rounds is the plan's ``leases`` (when each running
job's GPUs go back to auction). The controller keeps it in the state DB's meta table under
``META_KEY`` as JSON ``{"leases": {job: end}, "rho": {job: rho}, "apps": {job: app}}``,
and before each round puts it back on the snapshot's jobs (``Job.lease_end``) together
with each job's app: ``tsbatch --app`` (``app=`` in the job comment), else the admin's
``policy.apps`` mapping of accounts, else the policy's default (account + job name stem).
A job submitted with ``tsbatch --iterations N`` (``iters=N`` in the comment) also gets its
measured work left (``Job.measured_left``) from the hooks' files in its job directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import channel
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.state import JobRecord
from teiresias.domain import JobId, Plan, Snapshot
from teiresias.jobfiles import CheckpointRecord, RunRecord, read_records, read_runs
from teiresias.policy.themis.apps import app_of

META_KEY = "themis"


def load(raw: str | None) -> dict[str, dict[int, Any]]:
    """The stored state; empty on a first round or an unreadable value (leases then start afresh)."""
    try:
        data = json.loads(raw) if raw else {}
        return {k: {int(j): v for j, v in (data.get(k) or {}).items()} for k in ("leases", "rho", "apps")}
    except (ValueError, AttributeError, TypeError):
        return {"leases": {}, "rho": {}, "apps": {}}


def record_app(config: ControllerConfig, rec: JobRecord) -> str:
    """The explicit app of a job: its ``tsbatch --app``, else its account's app in the config ('' if neither)."""
    app = rec.files.app
    if app:
        return app
    return dict(config.policy.apps).get(rec.account, "")


def steps_done(runs: Mapping[int, RunRecord], checkpoints: Sequence[CheckpointRecord]) -> int:
    """Optimizer steps the job has kept: where its latest run resumed plus the steps that run timed.

    A run resumes from the newest checkpoint an earlier run wrote; steps after that checkpoint
    were lost with their run, so summing runs would overcount. The hooks leave a run's first few
    (warm-up) steps untimed, so this undercounts by those: the work left errs long.
    """
    saved = max((c.step for c in checkpoints), default=0)
    if not runs:
        return saved
    latest = runs[max(runs)]
    resumed = max((c.step for c in checkpoints if c.restart_count < latest.restart_count), default=0)
    return max(resumed + latest.steps, saved)


def work_left(total: int, runs: Mapping[int, RunRecord], checkpoints: Sequence[CheckpointRecord]) -> float | None:
    """Seconds left = (total - done) x the latest run's median step time; None before any step was timed."""
    if not runs:
        return None
    return max(total - steps_done(runs, checkpoints), 0) * runs[max(runs)].median_step_s


def record_work_left(rec: JobRecord) -> float | None:
    """The job's measured seconds left when it declared ``tsbatch --iterations`` and the hooks timed steps."""
    total, jobdir = rec.files.iterations, channel.folder(rec)
    if not total or jobdir is None:
        return None
    return work_left(total, read_runs(jobdir), read_records(jobdir))


def prepare(
    config: ControllerConfig,
    snapshot: Snapshot,
    records: Mapping[int, JobRecord],
    state: Mapping[str, Mapping[int, Any]],
) -> None:
    """Put apps and stored leases on the snapshot's jobs before ``decide`` (the owner's job, like a promotion)."""
    leases = state.get("leases", {})
    for j in snapshot.jobs:
        r = records.get(int(j.job_id))
        if r is not None:
            j.app = record_app(config, r)
            j.measured_left = record_work_left(r)
        j.lease_end = float(leases[int(j.job_id)]) if j.is_running and int(j.job_id) in leases else None


def after(snapshot: Snapshot, plan: Plan, state: Mapping[str, Mapping[int, Any]], audit: AuditLog, now: float) -> str:
    """Audit lease expiries and the round's auction; the JSON to store for the next round."""
    old = state.get("leases", {})
    by_id = {int(j.job_id): j for j in snapshot.jobs}
    apps = {int(j.job_id): app_of(j) for j in snapshot.jobs}
    # (stored ids are plain ints; the plan's are JobIds)
    expired = [JobId(jid) for jid, end in old.items() if jid in by_id and by_id[jid].is_running and end <= now]
    for jid in expired:
        if jid in plan.preempt:
            audit.write(
                jid, "lease-expired", "lease ended and the GPUs went to another app in the auction", app=apps[jid]
            )
        else:
            audit.write(
                jid,
                "lease-renewed",
                "lease ended; kept its GPUs for another lease",
                app=apps[jid],
                lease_ends=plan.leases.get(jid),
            )
    if plan.start or plan.preempt or expired:
        rho_by_app = {apps[int(j)]: round(r, 4) for j, r in plan.rho.items() if int(j) in apps}
        audit.write(
            None,
            "auction",
            f"{len(plan.start)} started, {len(plan.preempt)} preempted",
            rho=rho_by_app,
            started=[int(j) for j in plan.start],
            preempted=[int(j) for j in plan.preempt],
        )
    return json.dumps(
        {
            "leases": {str(j): e for j, e in plan.leases.items()},
            "rho": {str(j): r for j, r in plan.rho.items()},
            "apps": {str(j): a for j, a in apps.items()},
        }
    )
