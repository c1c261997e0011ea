"""`teiresias explain JOBID`: why a job waits, was preempted, or runs where it runs.

The controller keeps, after each round, what the explanation needs beyond
the job records (``round_summary``, meta key ``explain`` of the state DB):
each node's GPUs and how many were free, where running jobs sit, the
plan's starts and preemptions with their reasons, leases, and the VCs.
``explain`` (pure: records, that summary and a time in, an Explanation out)
runs in another process, as whoever asks, from a read-only copy of the DB.

Other users' jobs: the caller's ``visible`` test is the one `teiresias queue`
uses; jobs it hides are only counted (how many are ahead, how many GPUs they
hold), never named.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import accounting
from slurm_plugin.controller.state import JobRecord, Phase
from teiresias.domain import Plan, Snapshot

META_KEY = "explain"
SUMMARY_VERSION = 1


def vc_rows(plan: Plan) -> list[dict[str, Any]]:
    """The VCs of a cells plan (empty without VCs): quota and the GPUs their jobs hold."""
    report = getattr(plan, "report", None)
    if report is None:
        return []
    return [
        {
            "name": v.name,
            "accounts": list(v.accounts),
            "quota_gpus": v.quota_gpus,
            "guaranteed_gpus": v.guaranteed_gpus,
            "opportunistic_gpus": v.opportunistic_gpus,
            "guaranteed_jobs": list(v.guaranteed_jobs),
            "opportunistic_jobs": list(v.opportunistic_jobs),
        }
        for v in report.vcs
    ]


def round_summary(
    config: ControllerConfig, snapshot: Snapshot, plan: Plan, round_no: int, previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What one round leaves for `explain` (JSON-ready): each node's GPUs and how many
    were free at the snapshot, where running jobs sit, the plan's starts, its
    preemptions (carried on from ``previous`` while the job is active), leases and VCs."""
    active = {j.job_id for j in snapshot.jobs}
    previous = previous or {}
    preempted = {j: v for j, v in previous.get("preempted", {}).items() if int(j) in active}
    # A job stays in plan.preempt until its requeue: its preemption began at the first of those rounds.
    for j in set(plan.preempt) - set(previous.get("preempt", [])):
        preempted[str(j)] = [snapshot.now, plan.reasons.get(j, "")]
    free = snapshot.free_gpus()
    return {
        "version": SUMMARY_VERSION,
        "time": snapshot.now,
        "round": round_no,
        "policy": config.policy.name,
        "thresholds": list(config.policy.queues),
        "promote_knob": config.policy.promote_knob,
        "grace_seconds": config.preemption.grace_seconds,
        "nodes": {
            n.name: {"gpus": n.gpus, "unavailable": snapshot.unavailable.get(n.name, 0), "free": free.get(n.name, 0)}
            for n in snapshot.cluster.nodes
        },
        "running": {
            str(j.job_id): [[a.node, a.gpus] for a in j.placement.allocations]
            for j in snapshot.jobs
            if j.is_running and j.placement is not None
        },
        "start": {str(j): [[a.node, a.gpus] for a in p.allocations] for j, p in plan.start.items()},
        "preempt": sorted(plan.preempt),
        "preempted": preempted,
        # Leasing policies (themis) only; absent from older Plans.
        "leases": {str(j): t for j, t in getattr(plan, "leases", {}).items()},
        "vcs": vc_rows(plan),
    }


@dataclass(frozen=True)
class Ahead:
    job: int
    user: str
    phase: str
    queue: str
    gpus: int
    holds: list[dict[str, Any]]  # GPUs it holds now, per node


@dataclass(frozen=True)
class NextEvent:
    what: str
    at: float | None  # expected time (None: not predictable)


@dataclass(frozen=True)
class Explanation:
    job_id: int
    user: str
    name: str
    gpus: int
    state: str
    slurm_state: str | None
    final_state: str | None
    summary: str  # one sentence: the answer
    queue: str
    rank: int | None  # 1 = first in the policy's order
    ranked: int  # jobs in that order
    attained_gpu_seconds: float  # all GPU-time received
    queue_service_gpu_seconds: float  # W_J x t_J, what the queue thresholds compare (reset by a promotion)
    threshold_crossed: float | None  # the threshold that put it in its queue (None: Q1)
    next_threshold: float | None  # the one that demotes it (None: last queue)
    gittins_index: float | None
    reason: str
    placement: list[dict[str, Any]]
    preemptions: int
    last_preemption: dict[str, Any] | None
    ahead: list[Ahead]
    ahead_hidden: dict[str, int]  # jobs ahead the caller may not see: count and GPUs held
    nodes: list[dict[str, Any]]  # per node: GPUs, free at the last round, and this job's need
    vc: dict[str, Any] | None
    lease_end: float | None
    waiting_for_start: str | None
    next_event: NextEvent | None
    plan_time: float | None
    plan_round: int | None
    notes: list[str] = field(default_factory=list)
    lost_gpu_seconds: float = 0.0  # work its preemptions lost (GPU-s since the last checkpoint at each)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _queue_of(service: float, thresholds: list[float]) -> int:
    return sum(1 for t in thresholds if t <= service)


def _holds(r: JobRecord, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    if r.phase not in (Phase.RUNNING, Phase.PREEMPTING, Phase.STARTING):
        return []
    where = summary.get("running", {}).get(str(r.job_id))
    if where is None and r.planned is not None:
        where = [[a.node, a.gpus] for a in r.planned.allocations]
    return [{"node": n, "gpus": g} for n, g in (where or [])]


def _next_event(
    r: JobRecord,
    rank_of: Mapping[int, int],
    records: Mapping[int, JobRecord],
    summary: Mapping[str, Any],
    now: float,
    visible: Callable[[JobRecord], bool],
) -> NextEvent | None:
    thresholds = [float(t) for t in summary.get("thresholds", [])]
    knob = summary.get("promote_knob")
    lease = summary.get("leases", {}).get(str(r.job_id))
    if r.phase is Phase.FINISHED:
        return None
    if r.phase is Phase.PREEMPTING:
        grace = float(summary.get("grace_seconds", 0.0))
        return NextEvent(
            "requeued as soon as it acknowledges its checkpoint, at the latest when the grace time ends",
            (r.signal_time or now) + grace,
        )
    if r.phase is Phase.STARTING:
        return NextEvent("Slurm starts it on the nodes it was released to", None)
    events: list[NextEvent] = []
    service = accounting.attained_service(r, now)
    if r.phase is Phase.RUNNING:
        q = _queue_of(service, thresholds)
        if q < len(thresholds) and r.gpus > 0:
            events.append(
                NextEvent(
                    f"reaches the Q{q + 2} threshold ({thresholds[q]:g} GPU-s) and drops to Q{q + 2}",
                    now + (thresholds[q] - service) / r.gpus,
                )
            )
        if lease is not None:
            events.append(NextEvent("its lease ends: it keeps its GPUs only if it wins them again", float(lease)))
        if not events:
            return NextEvent("runs to its end unless a job ahead of it needs its GPUs", None)
        return min(events, key=lambda e: e.at or math.inf)
    # PENDING: its own promotion, or a running job ahead of it dropping to a lower queue.
    if "next try in" in r.reason:
        try:
            wait = float(r.reason.rsplit("next try in", 1)[1].strip().rstrip("s"))
            events.append(NextEvent("the controller tries to start it again", summary.get("time", now) + wait))
        except ValueError:
            pass
    if knob and r.queue > 0:
        executed = accounting.executed_time(r, now)
        waited = accounting.waiting_time(r, now)
        events.append(
            NextEvent(
                "starvation promotion back to Q1 (waited >= PROMOTEKNOB x executed time)",
                now + max(0.0, knob * executed - waited),
            )
        )
    me = rank_of.get(r.job_id)
    for j, o in records.items():
        if o.phase is not Phase.RUNNING or o.gpus <= 0 or me is None or rank_of.get(j, math.inf) >= me:
            continue
        s = accounting.attained_service(o, now)
        q = _queue_of(s, thresholds)
        if q < len(thresholds) and q <= r.queue:
            who = f"job {j}" if visible(o) else "a job of another user"
            events.append(
                NextEvent(
                    f"{who} (running, ahead of it) drops to Q{q + 2} at {thresholds[q]:g} GPU-s,"
                    " which may let this job pass it",
                    now + (thresholds[q] - s) / o.gpus,
                )
            )
    if events:
        return min(events, key=lambda e: e.at or math.inf)
    return NextEvent("a job ahead of it ends or is preempted", None)


def explain(
    job_id: int,
    records: Mapping[int, JobRecord],
    summary: Mapping[str, Any] | None,
    now: float,
    visible: Callable[[JobRecord], bool],
    slurm_state: str | None = None,
) -> Explanation:
    """The explanation of one job (which the caller has checked exists and is visible)."""
    r = records[job_id]
    summary = summary or {}
    thresholds = [float(t) for t in summary.get("thresholds", [])]
    order = sorted((o for o in records.values() if o.active and o.rank is not None), key=lambda o: o.rank or 0)
    rank_of = {o.job_id: i for i, o in enumerate(order)}
    me = rank_of.get(job_id)
    ahead: list[Ahead] = []
    hidden = {"jobs": 0, "gpus_held": 0}
    if r.active and me is not None:
        for o in order[:me]:
            holds = _holds(o, summary)
            if visible(o):
                ahead.append(Ahead(o.job_id, o.user, o.phase.value, f"Q{o.queue + 1}", o.gpus, holds))
            else:
                hidden["jobs"] += 1
                hidden["gpus_held"] += sum(h["gpus"] for h in holds)
    service = accounting.attained_service(r, now)
    q = r.queue
    crossed = thresholds[q - 1] if 0 < q <= len(thresholds) else None
    nxt = thresholds[q] if q < len(thresholds) else None
    placement = _holds(r, summary)
    start = summary.get("start", {}).get(str(job_id))
    nodes = []
    for n, info in summary.get("nodes", {}).items():
        nodes.append(
            {
                "node": n,
                "gpus": info["gpus"],
                "unavailable": info.get("unavailable", 0),
                "free": info["free"],
                "planned_for_it": sum(g for m, g in (start or []) if m == n),
            }
        )
    vc = None
    for v in summary.get("vcs", []):
        if r.account in v.get("accounts", []):
            vc = {
                "name": v["name"],
                "quota_gpus": v["quota_gpus"],
                "guaranteed_gpus": v["guaranteed_gpus"],
                "opportunistic_gpus": v["opportunistic_gpus"],
                "this_job": "guaranteed"
                if job_id in v.get("guaranteed_jobs", [])
                else "opportunistic"
                if job_id in v.get("opportunistic_jobs", [])
                else "waiting",
            }
    lease = summary.get("leases", {}).get(str(job_id))
    waiting = None
    if r.phase is Phase.STARTING and r.planned is not None:
        # The record is the last round's; Slurm, asked now, may have started it since.
        started = slurm_state == "RUNNING"
        waiting = (
            "released to "
            + ", ".join(f"{a.gpus} GPU(s) on {a.node}" for a in r.planned.allocations)
            + (
                "; Slurm has started it since the controller's last round"
                if started
                else "; Slurm has not started it yet"
            )
        )
    elif r.phase is Phase.PENDING and start is not None:
        waiting = (
            "the last plan starts it on "
            + ", ".join(f"{g} GPU(s) on {n}" for n, g in start)
            + (f"; {r.reason}" if r.reason else "")
        )
    last = summary.get("preempted", {}).get(str(job_id))
    last_preemption = {"time": last[0], "reason": last[1]} if last else None
    free_total = sum(v["free"] for v in summary.get("nodes", {}).values())
    state = r.final_state or r.phase.value
    if r.phase is Phase.FINISHED:
        text = f"job {job_id} has ended ({r.final_state or 'FINISHED'}); nothing waits on it"
    elif r.phase in (Phase.RUNNING, Phase.STARTING):
        runs = r.phase is Phase.RUNNING or slurm_state == "RUNNING"
        text = (
            f"job {job_id} {'runs' if runs else 'is starting'} on "
            + (", ".join(f"{p['gpus']} GPU(s) on {p['node']}" for p in placement) or "its nodes")
            + f", Q{q + 1}, rank {me + 1 if me is not None else '?'} of {len(order)}"
        )
    elif r.phase is Phase.PREEMPTING:
        text = (
            f"job {job_id} is being preempted"
            + (f": {last_preemption['reason']}" if last_preemption else "")
            + "; it checkpoints and goes back to the queue"
        )
    else:
        # The GPUs the jobs ahead hold now (a pending one holds none), not those they ask for.
        gpus_ahead = sum(h["gpus"] for a in ahead for h in a.holds) + hidden["gpus_held"]
        text = (
            f"job {job_id} waits in Q{q + 1} at rank {me + 1 if me is not None else '?'} of {len(order)}: "
            f"{r.reason or 'no reason recorded yet'}; {len(ahead) + hidden['jobs']} job(s) ahead"
            f" (holding {gpus_ahead} GPU(s) among those running), {free_total} GPU(s) free for its {r.gpus}"
        )
    notes = []
    if not summary:
        notes.append(
            "the controller has not recorded a plan yet (older controller, or no round ran):"
            " nodes, starts and leases are unknown"
        )
    return Explanation(
        job_id=job_id,
        user=r.user,
        name=r.name,
        gpus=r.gpus,
        state=state,
        slurm_state=slurm_state,
        final_state=r.final_state,
        summary=text,
        queue=f"Q{q + 1}",
        rank=None if me is None else me + 1,
        ranked=len(order),
        attained_gpu_seconds=round(accounting.attained_gpu_seconds(r, now), 1),
        queue_service_gpu_seconds=round(service, 1),
        threshold_crossed=crossed,
        next_threshold=nxt,
        gittins_index=r.gittins,
        reason=r.reason,
        placement=placement,
        preemptions=r.preemptions,
        lost_gpu_seconds=round(r.lost_gpu_seconds, 1),
        last_preemption=last_preemption,
        ahead=ahead,
        ahead_hidden=hidden,
        nodes=nodes,
        vc=vc,
        lease_end=float(lease) if lease is not None else None,
        waiting_for_start=waiting,
        next_event=_next_event(r, rank_of, records, summary, now, visible),
        plan_time=summary.get("time"),
        plan_round=summary.get("round"),
        notes=notes,
    )


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "unknown"
    d = t - now
    return f"in {d:.0f}s" if d >= 0 else f"{-d:.0f}s ago"


def format_text(e: Explanation, now: float) -> str:
    """The explanation as a few aligned lines."""
    lines = [e.summary, ""]

    def row(k: str, v: str) -> None:
        lines.append(f"  {k:<14} {v}")

    row(
        "job",
        f"{e.job_id} ({e.name}, user {e.user}, {e.gpus} GPU(s)), state {e.state}"
        + (f", Slurm {e.slurm_state}" if e.slurm_state else ""),
    )
    row("queue", f"{e.queue}, rank {e.rank if e.rank is not None else '-'} of {e.ranked}")
    thr = f"crossed {e.threshold_crossed:g} GPU-s" if e.threshold_crossed is not None else "below every threshold"
    thr += f", next {e.next_threshold:g} GPU-s" if e.next_threshold is not None else ", last queue"
    row(
        "service",
        f"{e.attained_gpu_seconds:g} GPU-s attained ({e.queue_service_gpu_seconds:g} since its last"
        f" promotion; {thr})" + (f", Gittins index {e.gittins_index:.3g}" if e.gittins_index is not None else ""),
    )
    if e.reason:
        row("why", e.reason)
    if e.placement:
        row("placed", ", ".join(f"{p['gpus']} GPU(s) on {p['node']}" for p in e.placement))
    if e.waiting_for_start:
        row("start", e.waiting_for_start)
    if e.preemptions or e.last_preemption:
        last = e.last_preemption
        row(
            "preempted",
            f"{e.preemptions} time(s), {e.lost_gpu_seconds:g} GPU-s of work lost"
            + (f", last {_ago(last['time'], now)}: {last['reason']}" if last else ""),
        )
    if e.ahead or e.ahead_hidden["jobs"]:
        parts = [
            f"{a.job} ({a.user}, {a.phase.lower()}, {a.queue}, {a.gpus} GPU(s)"
            + (" on " + ",".join(f"{h['node']}:{h['gpus']}" for h in a.holds) if a.holds else "")
            + ")"
            for a in e.ahead[:10]
        ]
        if len(e.ahead) > 10:
            parts.append(f"{len(e.ahead) - 10} more")
        if e.ahead_hidden["jobs"]:
            parts.append(f"{e.ahead_hidden['jobs']} of other users holding {e.ahead_hidden['gpus_held']} GPU(s)")
        row("ahead", "; ".join(parts))
    if e.nodes:
        row(
            "nodes",
            ", ".join(
                f"{n['node']} {n['free']}/{n['gpus']} free"
                + (f" ({n['planned_for_it']} for it)" if n["planned_for_it"] else "")
                for n in e.nodes
            )
            + f"; it needs {e.gpus}",
        )
    if e.vc:
        row(
            "vc",
            f"{e.vc['name']}: {e.vc['guaranteed_gpus']}/{e.vc['quota_gpus']} guaranteed GPUs used,"
            f" {e.vc['opportunistic_gpus']} opportunistic; this job {e.vc['this_job']}",
        )
    if e.lease_end is not None:
        row("lease", f"ends {_ago(e.lease_end, now)}")
    if e.next_event is not None:
        row("next", e.next_event.what + (f" ({_ago(e.next_event.at, now)})" if e.next_event.at is not None else ""))
    row("plan", f"round {e.plan_round}, {_ago(e.plan_time, now)}" if e.plan_time is not None else "none recorded")
    for n in e.notes:
        row("note", n)
    return "\n".join(lines) + "\n"
