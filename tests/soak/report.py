"""What the soak prints: each violation with its job (key, Slurm id, user, the
submitting command), the seed, and the job's events merged from the driver's
log, sacct and the controller's audit log; and the run's summary (jobs,
faults, invariants checked, rounds, violations)."""

from __future__ import annotations

from typing import Any

from tests.soak import windows as W
from tests.soak.collect import Observation, Unit
from tests.soak.invariants import NAMES, Result, Violation

# Audit actions worth a line in a job's events (timeline stages are folded into sacct's runs).
_AUDIT = {
    "start",
    "hold",
    "signal",
    "requeue",
    "queue",
    "promote",
    "finished",
    "vanished",
    "replaced",
    "start-failed",
    "preempt-skipped",
    "array-split",
}


def sequence(obs: Observation, u: Unit) -> list[tuple[float, str, str]]:
    """The job's events, in time order: (time, source, text)."""
    raws = {r.raw for r in u.runs} | ({u.raw} if u.raw is not None else set())
    out: list[tuple[float, str, str]] = []
    for e in obs.events:
        if e.key == u.spec.key:
            extra = "" if e.ok else f" FAILED {e.extra.get('err') or e.extra.get('skipped') or ''}".rstrip()
            who = f" by {e.by}" if e.by else ""
            why = f" ({e.extra['waits_for']})" if e.extra.get("waits_for") else ""
            out.append(
                (e.t, "driver", f"{e.what}{who}{why}{extra}" + (f" -> job {e.job}" if e.what == "submit" else ""))
            )
        elif e.what in ("fault", "fault-end"):
            out.append((e.t, "fault", f"{e.what} {e.fault} {e.node}".rstrip()))
    for k, r in enumerate(u.runs):
        if r.start is not None:
            out.append((r.start, "sacct", f"run {k} started on {','.join(r.nodes)} with {r.gpus} GPU(s)"))
        if r.end is not None:
            out.append((r.end, "sacct", f"run {k} ended {r.state} exit {r.exit_code}:{r.exit_signal}"))
    for e in obs.audit:
        if e.get("job") in raws and e.get("action") in _AUDIT:
            extra = {k: v for k, v in e.items() if k not in ("time", "job", "action", "reason")}
            more = " " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else ""
            out.append((e["time"], "audit", f"{e['action']}: {e.get('reason', '')}{more}"))
    out.sort(key=lambda x: x[0])
    if out:  # faults only inside the job's own lifetime
        first = next((t for t, s, _ in out if s != "fault"), out[0][0])
        last = max((t for t, s, _ in out if s != "fault"), default=first)
        out = [x for x in out if x[1] != "fault" or first <= x[0] <= last]
    return out


def format_violation(obs: Observation, v: Violation) -> str:
    lines = [f"INVARIANT {v.invariant} ({NAMES[v.invariant]}) violated: {v.what}; seed {obs.seed}"]
    u = obs.units.get(v.key)
    if u is None:
        lines.append(f"  cluster: {v.detail}")
        return "\n".join(lines)
    lines.append(f"  job {v.key} (Slurm {u.sacct_id or 'none'}, user {u.spec.user}, kind {u.spec.kind}): {v.detail}")
    lines.append(f"  submitted with: {obs.lines.get(u.spec.key, ' '.join(u.spec.sbatch))}")
    for t, src, text in sequence(obs, u):
        if src == "fault" and v.at is not None and not v.at - 120 <= t <= v.at + 5:
            continue  # only the faults just before the violation
        mark = "  <-" if v.at is not None and abs(t - v.at) < 0.5 else ""
        lines.append(f"    {t - obs.started:+9.1f}s  {src:6}  {text}{mark}")
    return "\n".join(lines)


def summary(obs: Observation, res: Result) -> dict[str, Any]:
    """The figures docs/benchmarks.md "Soak" records."""
    runs = [r for r in obs.rows if r.start is not None]
    plain_lost = sum(
        r.elapsed * r.gpus for u in obs.units.values() if not u.spec.resumable for r in u.runs if r.state == "REQUEUED"
    )
    first = min((e.t for e in obs.events), default=0.0)
    last = max((e.t for e in obs.events), default=0.0)
    by_inv = {i: sum(1 for v in res.violations if v.invariant == i) for i in NAMES}
    return {
        "seed": obs.seed,
        "args": obs.workload.args,
        "wall_s": round(last - first, 1),
        "submissions": sum(1 for e in obs.events if e.what == "submit"),
        "refused": sum(1 for e in obs.events if e.what == "submit" and not e.ok),
        "jobs": len(obs.units),
        "runs": len(runs),
        "requeues": sum(1 for r in obs.rows if r.state == "REQUEUED"),
        "faults": {f: sum(1 for e in obs.events if e.what == "fault" and e.fault == f) for f in _faults(obs)},
        "user_actions": {
            a: sum(1 for e in obs.events if e.what == a and e.ok)
            for a in ("hold", "release", "cancel", "ungpu", "requeue")
        },
        "rounds": len(obs.rounds),
        "checks": dict(res.checks),
        "violations": by_inv,
        "violating_jobs": {i: sorted({v.key for v in res.violations if v.invariant == i}) for i in NAMES if by_inv[i]},
        "plain_lost_gpu_seconds": round(plain_lost, 1),
        "drain": next((e.extra.get("why", "") for e in obs.events if e.what == "drained"), ""),
        "notes": res.notes,
        "fault_windows": [(round(w.start - first, 1), round(w.end - first, 1), w.why) for w in W.fault_windows(obs)],
    }


def _faults(obs: Observation) -> list[str]:
    return sorted({e.fault for e in obs.events if e.what == "fault"})


def format_summary(s: dict[str, Any]) -> str:
    lines = [
        f"soak seed {s['seed']}: {s['submissions']} submissions ({s['refused']} refused), {s['jobs']} jobs, "
        f"{s['runs']} runs ({s['requeues']} requeued), {s['rounds']} controller rounds, {s['wall_s']:.0f}s",
        "faults: " + ", ".join(f"{k} x{v}" for k, v in s["faults"].items()),
        "user actions: " + ", ".join(f"{k} x{v}" for k, v in s["user_actions"].items()),
        f"plain jobs' work lost to requeues: {s['plain_lost_gpu_seconds']:.0f} GPU-s",
        f"queue drained: {s['drain'] or '?'}" + (f"; not judged: {'; '.join(s['notes'][:8])}" if s["notes"] else ""),
    ]
    for i, name in NAMES.items():
        n = s["violations"][i]
        jobs = s.get("violating_jobs", {}).get(i, [])
        lines.append(
            f"  invariant {i} ({name}): {s['checks'][i]} checks, {n} violation(s)"
            + (f": {', '.join(jobs[:10])}{' ...' if len(jobs) > 10 else ''}" if jobs else "")
        )
    return "\n".join(lines)
