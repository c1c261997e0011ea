"""The soak's invariants (issue 20 A; stated as the controller's promises in
docs/controller.md "Promises" and docs/job-states.md "Invariants"), checked on
an Observation (tests/soak/collect.py). Pure: no clock, no I/O.

1. Every job ends in the state its own script or user asked for; none FAILED,
   lost (VANISHED, or startable and never finished) or run twice because of
   the controller; a second controller on the same cluster never acts.
2. Attained GPU-time never goes down (no record replaced; a live figure may
   be corrected down by one poll interval of GPU-time when the run's end is
   read), every run Slurm ran is in the controller's accounting, each within
   one poll interval (or the gap between the rounds around its end, if longer;
   +1 s of Slurm's whole seconds) of sacct's elapsed time.
3. User intent kept: person holds (at submission or later) stand until that
   person releases, ``-w`` nodes used, ``-x`` nodes avoided, sizes and node
   counts, begin times, dependencies, array throttles.
4. No preemption on behalf of a job that then does not start within three
   rounds of its GPUs coming free (unless it was cancelled or held, another
   job started on those nodes, or a fault came between).
5. No GPU idle for more than two poll intervals (and three rounds) while a
   startable job that fits waits (tests/soak/idle.py).
6. Every preemption of a checkpointing job was acknowledged or waited its
   grace time; a checkpointing job is never requeued without its signal; every
   requeue of a plain job says the work it lost (audit ``lost_gpu_seconds``).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field

from tests.soak import windows as W
from tests.soak.collect import Observation, Run, Unit
from tests.soak.idle import fits_at, idle_windows

NAMES = {
    1: "ends as asked: nothing FAILED, lost or run twice because of the controller",
    2: "attained GPU-time never goes down and agrees with sacct",
    3: "user intent kept (holds, node lists, sizes, begin times, dependencies, throttles)",
    4: "no preemption for a job that then does not start",
    5: "no GPU idle while a startable job waits",
    6: "checkpointing preemptions acked or given their grace; plain jobs' lost work counted",
}
# The audit key a requeue of a plain job carries: GPU-seconds since its last checkpoint
# (issue 20 B12; a plain job has none, so the whole run).
LOST_KEY = "lost_gpu_seconds"
PREEMPTED_BY = re.compile(r"preempted by higher-priority job (\d+)")
# What a controller does to jobs (a rival controller must do none of it).
ACTING = ("start", "hold", "signal", "requeue", "array-split", "recover-requeue", "recover-start", "recover-hold")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@dataclass(frozen=True)
class Violation:
    invariant: int
    what: str  # a short code: end-state, lost, ran-again, hold, nodelist, ...
    key: str  # the unit ("" for the cluster as a whole)
    detail: str
    at: float | None = None


@dataclass
class Result:
    violations: list[Violation] = field(default_factory=list)
    checks: dict[int, int] = field(default_factory=lambda: dict.fromkeys(NAMES, 0))
    notes: list[str] = field(default_factory=list)  # what the run could not judge (the driver's cap)

    def fail(self, inv: int, what: str, key: str, detail: str, at: float | None = None) -> None:
        self.violations.append(Violation(inv, what, key, detail, at))

    def checked(self, inv: int, n: int = 1) -> None:
        self.checks[inv] += n


def check(obs: Observation) -> Result:
    """Every invariant on ``obs``."""
    W.index(obs, rebuild=True)
    res = Result()
    ends(obs, res)
    attained(obs, res)
    intent(obs, res)
    beneficiaries(obs, res)
    for w in idle_windows(obs):
        free = ", ".join(f"{n}:{g}" if g >= 0 else f"{n}:drained" for n, g in sorted(w.free.items()))
        promised = released_not_started(obs, w.start, w.end)
        res.fail(
            5,
            "idle-gpus",
            w.key,
            f"startable {_t(obs, w.start)}..{_t(obs, w.end)} ({w.end - w.start:.1f}s, {w.rounds} rounds) "
            f"while GPUs it fits were free ({free})"
            + (f"; meanwhile released to Slurm, not started: {'; '.join(promised)}" if promised else ""),
            w.start,
        )
    res.checked(5, sum(1 for u in obs.units.values() if u.runs or u.spec.runnable))
    checkpoints(obs, res)
    return res


def released_not_started(obs: Observation, a: float, b: float) -> list[str]:
    """Jobs the controller released (audit ``start``) before ``b`` that had not started
    by ``a`` + a poll interval and were not running in [a, b]: GPUs promised, unused."""
    ix = W.index(obs)
    out = []
    lo = bisect.bisect_left(ix.start_times, a - 120.0)  # a release is given up within start_timeout
    for e in ix.starts[lo : bisect.bisect_right(ix.start_times, b)]:
        runs = [r for r in ix.rows_by_raw.get(e["job"], []) if r.start is not None and r.start >= e["time"] - 1]
        if any(r.start is not None and r.start <= a + obs.poll_s for r in runs):
            continue  # this release was taken up: the job started
        failed = next(iter(ix.audit_of(e["job"], "start-failed", "hold", after=e["time"])), None)
        if failed is not None and failed["time"] < a:
            continue  # given back before the window
        u = ix.by_raw.get(e["job"])
        name = f"{u.key} ({u.spec.kind})" if u else str(e["job"])
        out.append(f"{name} on {','.join(e.get('nodes', []))}" + (f", then {failed['reason']}" if failed else ""))
    return out[:4]


def last_word(obs: Observation, u: Unit) -> str:
    """The controller's last reason about the job (audit), for 'lost' jobs."""
    ix = W.index(obs)
    raws = {r.raw for r in u.runs} | ({u.raw} if u.raw is not None else set())
    said = sorted((e for j in raws for e in ix.audit_of(j, "start-failed", "hold", "start")), key=lambda e: e["time"])
    return (
        f"; the controller's last word: {said[-1]['action']} {said[-1]['reason']}"
        if said
        else "; never started by the controller"
    )


def _final(u: Unit) -> str:
    return u.runs[-1].state if u.runs else "NEVER_RAN"


def _t(obs: Observation, t: float | None) -> str:
    return "never" if t is None else f"+{t - obs.started:.1f}s"


# ------------------------------------------------------------------ 1
def _pending(u: Unit) -> bool:
    return not u.runs or u.runs[-1].start is None or u.runs[-1].state == "REQUEUED"


def ends(obs: Observation, res: Result) -> None:
    by_raw = W.unit_of_raw(obs)
    stop = next((e.extra.get("why", "stalled") for e in obs.events if e.what == "drained"), "stalled")
    for key, u in obs.units.items():
        s = u.spec
        sub = next((e for e in obs.events if e.key == s.key and e.what == "submit"), None)
        if sub is None:
            continue  # not reached (a run cut short)
        res.checked(1)
        if not sub.ok:
            if not s.may_refuse and "skipped" not in sub.extra:
                res.fail(1, "refused", key, f"sbatch refused a valid request: {sub.extra.get('err', '')}", sub.t)
            continue
        for k, (a, b) in enumerate(zip(u.runs, u.runs[1:])):
            if a.state != "REQUEUED":
                res.fail(1, "ran-again", key, f"run {k} ended {a.state}, and the job ran again", b.start)
            elif a.end is not None and b.start is not None and b.start < a.end:
                res.fail(1, "ran-twice", key, f"run {k + 1} started before run {k} ended", b.start)
        started = [r for r in u.runs if r.start is not None]
        if s.no_requeue and len(started) > 1:
            res.fail(
                1, "requeued-no-requeue", key, f"submitted --no-requeue, ran {len(started)} times", started[1].start
            )
        if not s.runnable and started:
            res.fail(1, "impossible-start", key, "asks for a GPU type no node has, yet ran", started[0].start)
        final = _final(u)
        last = u.runs[-1] if u.runs else None
        cancel = W.event(obs, s.key, "cancel")
        gone = W.end_cancel(obs, s.key)
        if gone is not None and last is not None and last.end is not None and last.end < (gone.t0 or gone.t - 2) - 1:
            gone = None  # ended before the driver's cancels (an array's other tasks were still there)
        if cancel is not None:
            allowed = {"CANCELLED", "NEVER_RAN"}
            if last is not None and last.end is not None and last.end <= cancel.t + 1:
                allowed.add(s.ends)
        elif gone is not None and gone.extra.get("waits_for"):
            allowed = {"CANCELLED", "NEVER_RAN"}
        elif gone is not None:
            if stop != "stalled":
                res.notes.append(f"{key}: still {'pending' if _pending(u) else 'running'} at the driver's cap")
                continue
            if _pending(u) and not fits_at(obs, u, gone.t - 1):
                res.notes.append(f"{key}: waiting for GPUs when the queue stalled")
            elif _pending(u):
                res.fail(
                    1,
                    "lost",
                    key,
                    "startable, yet still pending when the driver stopped waiting" + last_word(obs, u),
                    gone.t,
                )
            else:
                res.notes.append(f"{key}: still running when the queue stalled")
            continue
        else:
            allowed = {s.ends}
        if final not in allowed:
            code = f" (exit {last.exit_code}:{last.exit_signal})" if last else ""
            res.fail(
                1, "end-state", key, f"ended {final}{code}; asked for {' or '.join(sorted(allowed))}", last and last.end
            )
        elif final == "FAILED" and last is not None and last.exit_code != s.exit_code:
            res.fail(
                1, "exit-code", key, f"FAILED with exit {last.exit_code}; its script exits {s.exit_code}", last.end
            )
        raw = u.raw
        rec = obs.records.get(raw) if raw is not None else None
        if rec is not None and rec.final_state == "VANISHED" and u.runs:
            res.fail(
                1, "vanished", key, f"closed VANISHED by the controller; Slurm ended it {final}", last and last.end
            )
    acted = [e for e in obs.rival_audit if e.get("action") in ACTING]
    res.checked(1)
    if acted:
        jobs = sorted({e["job"] for e in acted if e.get("job") is not None})
        names = [by_raw[j].key if j in by_raw else str(j) for j in jobs[:8]]
        res.fail(
            1,
            "two-controllers",
            "",
            f"a second controller (its own state DB) acted {len(acted)} times on the cluster "
            f"(jobs {', '.join(names)}{'...' if len(jobs) > 8 else ''}); first: {acted[0]['action']} {acted[0]['reason']}",
            acted[0]["time"],
        )


# ------------------------------------------------------------------ 2
def attained(obs: Observation, res: Result) -> None:
    def tol(end: float) -> float:
        """One poll interval (+1 s of Slurm's whole seconds); where rounds came further
        apart around the run's end (a loaded machine, a fault), that gap."""
        i = bisect.bisect_left(obs.rounds, end)
        gap = obs.rounds[i] - obs.rounds[i - 1] if 0 < i < len(obs.rounds) else obs.poll_s
        return max(obs.poll_s, gap) + 1.0

    seq: dict[int, list[tuple[float, float]]] = {}
    replaced: dict[int, dict] = {}
    for e in obs.audit:
        j = e.get("job")
        if j is None:
            continue
        if "attained_gpu_seconds" in e:
            seq.setdefault(j, []).append((e["time"], float(e["attained_gpu_seconds"])))
        if e.get("action") == "replaced":
            replaced.setdefault(j, e)
    for key, u in obs.units.items():
        raw = u.raw
        started = [r for r in u.runs if r.start is not None]
        if raw is None or u.spec.kind == "hetjob" or W.event(obs, u.spec.key, "ungpu") is not None:
            continue
        res.checked(2)
        rec = obs.records.get(raw)
        if rec is None:
            if started:
                res.fail(2, "unrecorded", key, f"ran {len(started)} time(s), never in the controller's records")
            continue
        if raw in replaced or rec.archived:
            e = replaced.get(raw, {})
            res.fail(
                2, "replaced", key, f"its record was replaced by a fresh one: {e.get('reason', '')}", e.get("time")
            )
        values = seq.get(raw, [])
        for (_, v1), (t2, v2) in zip(values, values[1:]):
            # A live figure counts the open run to the round's clock; the run's end, read
            # from Slurm later, may correct it down by up to a poll interval of GPU-time.
            if v2 < v1 - (obs.poll_s + 1.0) * max(u.spec.gpus, 1):
                res.fail(2, "attained-down", key, f"attained GPU-time went down from {v1:.1f} to {v2:.1f}", t2)
                break
        if started and rec.first_start_time is None:
            res.fail(2, "no-first-start", key, "ran, but the controller has no first start time", started[0].start)
        segs = {s[0]: s for s in rec.segments}
        for k, r in enumerate(u.runs):
            if r.start is None or r.end is None:
                continue
            seg = segs.get(k)
            if seg is None:
                res.fail(
                    2,
                    "run-unaccounted",
                    key,
                    f"run {k} ({_t(obs, r.start)}..{_t(obs, r.end)}, {r.elapsed:.0f}s) is missing from its accounting",
                    r.start,
                )
                continue
            got = seg[2] - seg[1]
            if abs(got - r.elapsed) > tol(r.end):
                res.fail(
                    2,
                    "run-mismatch",
                    key,
                    f"run {k}: {got:.1f}s in the controller's accounting, {r.elapsed:.0f}s in sacct",
                    r.start,
                )
        total = sum(r.elapsed for r in started)
        if abs(rec.closed_run_seconds - total) > sum(tol(r.end) for r in started if r.end is not None) + 1.0:
            res.fail(
                2,
                "total-mismatch",
                key,
                f"{rec.closed_run_seconds:.1f}s of runs in the controller's accounting, {total:.0f}s in sacct",
            )


# ------------------------------------------------------------------ 3
def intent(obs: Observation, res: Result) -> None:
    arrays: dict[str, list[Run]] = {}
    for key, u in obs.units.items():
        s = u.spec
        sub = W.event(obs, s.key, "submit")
        if sub is None:
            continue
        started = [r for r in u.runs if r.start is not None]
        for w in W.person_holds(obs, s.key):
            res.checked(3)
            # Slurm's start is whole seconds; a start in the hold's own second (+1 for the
            # hold racing a release in flight) may have come just before it.
            lo = w.start if s.held and w.start == (sub.t0 or sub.t) else int(w.start) + 2
            for r in started:
                assert r.start is not None
                # a start Slurm stamps T happened in [T, T+1): one in the release's own second is after it
                if lo <= r.start < (math.floor(w.end) if w.end != math.inf else math.inf):
                    res.fail(
                        3,
                        "hold",
                        key,
                        f"started {_t(obs, r.start)} while {w.why} (since {_t(obs, w.start)}, "
                        f"released {_t(obs, w.end if w.end != float('inf') else None)})",
                        r.start,
                    )
                    break
        ungpu = W.event(obs, s.key, "ungpu") is not None
        if (s.required or s.excluded) and u.raw is not None:
            # the controller's own placement (audit `start`), whether or not Slurm then refused it
            for e in W.index(obs).audit_of(u.raw, "start"):
                res.checked(3)
                placed = set(e.get("nodes", []))
                if set(s.excluded) & placed:
                    res.fail(
                        3,
                        "excluded",
                        key,
                        f"asked -x {','.join(s.excluded)}, placed on {','.join(sorted(placed))}",
                        e["time"],
                    )
                    break
                if s.required and not set(s.required) <= placed:
                    res.fail(
                        3,
                        "nodelist",
                        key,
                        f"asked -w {','.join(s.required)}, placed on {','.join(sorted(placed))}",
                        e["time"],
                    )
                    break
        for r in started:
            res.checked(3)
            if s.required and not set(s.required) <= set(r.nodes):
                res.fail(3, "nodelist", key, f"asked -w {','.join(s.required)}, ran on {','.join(r.nodes)}", r.start)
            if set(s.excluded) & set(r.nodes):
                res.fail(3, "excluded", key, f"asked -x {','.join(s.excluded)}, ran on {','.join(r.nodes)}", r.start)
            if not ungpu and s.kind != "hetjob" and r.gpus != s.gpus:
                res.fail(3, "size", key, f"asked {s.gpus} GPUs, ran with {r.gpus}", r.start)
            if s.nodes and not ungpu and len(r.nodes) != s.nodes:
                res.fail(3, "node-count", key, f"asked -N {s.nodes}, ran on {len(r.nodes)} node(s)", r.start)
        if s.begin_s is not None and started:
            res.checked(3)
            earliest = int(sub.t0 or sub.t) + s.begin_s - 1
            first = started[0].start
            assert first is not None
            if first < earliest:
                res.fail(3, "begin", key, f"--begin=now+{s.begin_s}: started {earliest - first:.0f}s early", first)
        if s.after is not None and started:
            res.checked(3)
            how, dep_key = s.after
            dep = obs.units.get(dep_key)
            dep_end = dep.runs[-1].end if dep and dep.runs else None
            first = started[0].start
            assert first is not None
            if how == "afterok" and (dep is None or _final(dep) != "COMPLETED"):
                res.fail(
                    3, "dependency", key, f"afterok on {dep_key}, which ended {_final(dep) if dep else '?'}", first
                )
            elif dep_end is None or first < dep_end:
                res.fail(3, "dependency", key, f"{how} on {dep_key}: started before it ended", first)
        if s.tasks:
            arrays.setdefault(s.key, []).extend(started)
    for key, runs in arrays.items():
        throttle = obs.workload.jobs[key].throttle
        res.checked(3)
        points = sorted(
            [(r.start, 1) for r in runs] + [(r.end if r.end is not None else float("inf"), -1) for r in runs]
        )
        n = 0
        for t, d in sorted(points, key=lambda p: (p[0], p[1])):
            n += d
            if throttle and n > throttle:
                res.fail(3, "throttle", key, f"{n} tasks ran at once; the array asked %{throttle}", t)
                break


# ------------------------------------------------------------------ 4
@dataclass(frozen=True)
class _Preemption:
    t: float  # the signal (a checkpointing victim) or the requeue (a plain one)
    victim: int
    beneficiary: Unit
    freed: float  # the victim's requeue: its GPUs free


def _preemptions(obs: Observation) -> list[_Preemption]:
    ix = W.index(obs)
    out = []
    for e in obs.audit:
        act, victim = e.get("action"), e.get("job")
        m = PREEMPTED_BY.search(e.get("reason", "")) if act in ("signal", "requeue") else None
        ben = ix.by_raw.get(int(m[1])) if m is not None else None
        if ben is None or victim is None:
            continue
        freed = e["time"]
        if act == "signal":
            nxt = next(iter(ix.audit_of(victim, "requeue", "finished", after=freed)), None)
            if nxt is None:
                continue  # still checkpointing when the run ended
            freed = nxt["time"]
        out.append(_Preemption(e["time"], victim, ben, freed))
    return out


def beneficiaries(obs: Observation, res: Result) -> None:
    ix = W.index(obs)
    faults = W.fault_windows(obs)
    missed: dict[str, list[str]] = {}
    first_at: dict[str, float] = {}
    prs = _preemptions(obs)
    by_ben: dict[str, list[_Preemption]] = {}
    for p in prs:
        by_ben.setdefault(p.beneficiary.key, []).append(p)

    def deadline_after(freed: float) -> float | None:
        third = W.rounds_after(obs, freed + 1, 3)
        return None if third is None else max(third, freed + 3 * obs.poll_s)

    for p in prs:
        ben, t, victim = p.beneficiary, p.t, p.victim
        res.checked(4)
        # The job waits for every victim preempted for it (the slowest Ack), and for
        # victims the controller adds while it waits: the deadline counts from the last.
        freed = p.freed
        deadline = deadline_after(freed)
        grown = True
        while grown and deadline is not None:
            grown = False
            for q in by_ben[ben.key]:
                if t - 2 * obs.poll_s <= q.t <= deadline and q.freed > freed:
                    freed, deadline, grown = q.freed, deadline_after(q.freed), True
                    break
        if deadline is None:
            continue  # the run ended first
        if any(r.start is not None and t - 1 <= r.start <= deadline for r in ben.runs):
            continue
        if any(w.overlaps(t, deadline) for w in faults):
            continue
        if any(
            x.key == ben.spec.key and x.what in ("cancel", "hold", "end-cancel") and t - 1 <= x.t <= deadline
            for x in obs.events
        ):
            continue
        if ben.runs and ben.runs[-1].end is not None and ben.runs[-1].end <= deadline and ben.runs[-1].state in FINAL:
            continue
        ben_raws = {raw for raw, x in ix.by_raw.items() if x is ben}  # a hetjob: each component
        refused = next(
            (
                x
                for j in ben_raws
                for x in ix.audit_of(j, "start-failed", after=t)
                if x["time"] <= deadline + obs.poll_s
            ),
            None,
        )
        vic = ix.by_raw.get(victim)
        vrun = next((r for r in reversed(vic.runs if vic else []) if r.start is not None and r.start <= t), None)
        vnodes = set(vrun.nodes) if vrun else set()
        if refused is None and any(
            r.raw != victim and set(r.nodes) & vnodes for r in ix.started_between(freed - 1, deadline)
        ):
            continue  # outranked by another job, which got those GPUs: not wasted
        why = f" (its start failed: {refused['reason']})" if refused is not None else ""
        missed.setdefault(ben.key, []).append(
            f"{vic.key if vic else victim} at {_t(obs, t)}, not started by {_t(obs, deadline)}{why}"
        )
        first_at.setdefault(ben.key, t)
    for key, victims in missed.items():
        res.fail(
            4,
            "preempted-for-nothing",
            key,
            f"{len(victims)} preemption(s) for it ({'; '.join(victims[:6])}): it did not start "
            "within three rounds of the GPUs coming free",
            first_at[key],
        )


# ------------------------------------------------------------------ 6
def checkpoints(obs: Observation, res: Result) -> None:
    by_raw = W.unit_of_raw(obs)
    signals: dict[int, list[float]] = {}
    last_signal: dict[int, float] = {}
    for e in sorted([*obs.audit, *({**x, "rival": True} for x in obs.rival_audit)], key=lambda x: x["time"]):
        job, act = e.get("job"), e.get("action")
        if job is None:
            continue
        if act == "signal":
            signals.setdefault(job, []).append(e["time"])
            last_signal[job] = e["time"]
        if e.get("rival"):
            continue  # a rival's signals excuse a requeue (invariant 1 reports the rival); its requeues are not judged here
        elif act in ("requeue", "recover-requeue"):
            u = by_raw.get(job)
            res.checked(6)
            sig = last_signal.pop(job, None)
            if sig is not None:
                waited = e["time"] - sig
                if act == "requeue" and not e.get("acked") and waited < obs.grace_s - 0.5:
                    res.fail(
                        6,
                        "grace-cut",
                        u.key if u else str(job),
                        f"requeued {waited:.1f}s after its checkpoint signal, without an Ack (grace {obs.grace_s:g}s)",
                        e["time"],
                    )
            elif act == "requeue" and u is not None and not u.spec.resumable:
                if LOST_KEY not in e:
                    res.fail(
                        6,
                        "lost-work-uncounted",
                        u.key,
                        f"requeued without a checkpoint; no {LOST_KEY} in the audit",
                        e["time"],
                    )
    for key, u in obs.units.items():
        if not u.spec.resumable:
            continue
        by_admin = [e for e in obs.events if e.key == u.spec.key and e.what == "requeue" and e.ok]
        for k, r in enumerate(u.runs):
            if r.state != "REQUEUED" or r.start is None or r.end is None:
                continue
            res.checked(6)
            if any((e.t0 or e.t) - 1 <= r.end <= e.t + 2 for e in by_admin):
                continue  # an admin's scontrol requeue: not the controller's preemption
            if not any(r.start - 1 <= t <= r.end + 1 for t in signals.get(r.raw, [])):
                res.fail(6, "no-checkpoint-signal", key, f"run {k} was requeued without its checkpoint signal", r.end)
