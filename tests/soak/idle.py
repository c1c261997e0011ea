"""Invariant 5: no GPU idle for more than two poll intervals while a startable job waits.

From sacct's runs the GPUs each node had free at every moment (a run holds its
GPUs from its start until RELEASE_S after its end; a drained node has none);
from the workload and the driver's log when each job was startable (submitted,
its begin time passed, its dependency met, not held by a person, not
cancelled, its array below its ``%N``); a job is startable *there* when the
free GPUs fit its own shape (one node with enough free GPUs, its ``-w`` node,
outside its ``-x`` nodes, N nodes with its per-node GPUs, or whole free nodes
for a multi-node ``--gpus``). A window in which a startable job fits is a
violation when it lasts longer than two poll intervals and at least three
controller rounds polled inside it (so a slow round on a loaded machine is
never blamed), outside faults and preemptions in flight
(windows.quiet_blockers). A hetjob that was accepted must start too: its
components each on a node with enough free GPUs. Jobs the cluster can never
run (a GPU type no node has) are not checked here (invariants 1 and 4 are).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass

from tests.soak import windows as W
from tests.soak.collect import Observation, Unit

INF = float("inf")
# slurmctld marks a dependency met in its own scheduling pass after the job it waits for
# ends, not at that instant: a few seconds on the local cluster.
DEPENDENCY_S = 5.0


@dataclass(frozen=True)
class IdleWindow:
    key: str
    start: float
    end: float
    free: dict[str, int]  # free GPUs per node at the window's start
    rounds: int


class FreeGpus:
    """Free GPUs per node as a step function of time."""

    def __init__(self, obs: Observation) -> None:
        gpn = obs.workload.gpus_per_node
        nodes = obs.workload.nodes
        by_raw = W.unit_of_raw(obs)
        changes: list[tuple[float, str, int]] = []
        for r in obs.rows:
            if r.start is None or r.gpus <= 0:
                continue
            end = (r.end if r.end is not None else INF) + W.RELEASE_S
            for node, g in W.split(obs, r, by_raw.get(r.raw)).items():
                changes += [(r.start, node, -g), (end, node, g)]
        for node, ws in W.drained(obs).items():
            for w in ws:  # a drained node offers nothing: all its GPUs taken, given back after
                changes += [(w.start, node, -10 * gpn), (w.end, node, 10 * gpn)]
        changes.sort(key=lambda c: c[0])
        self.times: list[float] = [-INF]
        free = {n: gpn for n in nodes}
        self.free: list[dict[str, int]] = [dict(free)]
        for t, node, d in changes:
            if node not in free:
                continue
            free[node] += d
            if t == self.times[-1]:
                self.free[-1] = dict(free)
            else:
                self.times.append(t)
                self.free.append(dict(free))

    def segments(self, a: float, b: float) -> Iterator[tuple[float, float, dict[str, int]]]:
        """(start, end, free per node) for the steps covering [a, b)."""
        i = max(bisect.bisect_right(self.times, a) - 1, 0)
        while i < len(self.times) and self.times[i] < b:
            start = max(self.times[i], a)
            end = min(self.times[i + 1] if i + 1 < len(self.times) else INF, b)
            if end > start:
                yield start, end, self.free[i]
            i += 1


def fits_at(obs: Observation, u: Unit, t: float) -> bool:
    """Whether the free GPUs at ``t`` fitted the job of ``u`` (one changed to 0 GPUs
    needs none)."""
    if W.event(obs, u.spec.key, "ungpu") is not None:
        return True
    free = obs.__dict__.get("_free")
    if free is None:
        free = obs.__dict__["_free"] = FreeGpus(obs)
    return any(fits(u, f, obs.workload.gpus_per_node) for _, _, f in free.segments(t, t + 1e-3))


def fits(u: Unit, free: dict[str, int], gpn: int) -> bool:
    """Whether the free GPUs fit the job's own shape (the safe side: only shapes
    that need no guess about how Slurm would split it)."""
    s = u.spec
    allowed = {n: max(g, 0) for n, g in free.items() if n not in s.excluded}
    if s.components:  # a hetjob: each component on one node, fullest free node first
        left = sorted(allowed.values(), reverse=True)
        for c in sorted(s.components, reverse=True):
            left.sort(reverse=True)
            if not left or left[0] < c:
                return False
            left[0] -= c
        return True
    if s.required:
        return all(allowed.get(n, 0) >= s.gpus // len(s.required) for n in s.required)
    if s.per_node:
        return sum(1 for g in allowed.values() if g >= s.per_node) >= (s.nodes or 1)
    if s.gpus <= gpn and (s.nodes or 1) == 1:
        return any(g >= s.gpus for g in allowed.values())
    return sum(1 for g in allowed.values() if g >= gpn) >= math.ceil(s.gpus / gpn)


def waiting(obs: Observation, u: Unit, siblings: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """When the job of ``u`` was startable and not running (merged intervals)."""
    s = u.spec
    sub = W.event(obs, s.key, "submit")
    if sub is None or not s.runnable or W.event(obs, s.key, "ungpu") is not None:
        return []
    start = sub.t
    if s.begin_s is not None:
        start = max(start, math.floor(sub.t0 or sub.t) + s.begin_s + 1)
    if s.after is not None:
        how, dep_key = s.after
        dep = obs.units.get(dep_key)
        if dep is None or not dep.runs or dep.runs[-1].end is None:
            return []
        if how == "afterok" and dep.runs[-1].state != "COMPLETED":
            return []
        start = max(start, dep.runs[-1].end + 1 + DEPENDENCY_S)
    stop = min((e.t0 or e.t for e in obs.events if e.key == s.key and e.what == "cancel" and e.ok), default=INF)
    spans: list[tuple[float, float]] = []
    at = start
    for r in u.runs:
        if r.start is None:
            continue
        if r.start > at:
            spans.append((at, r.start))
        at = max(at, (r.end if r.end is not None else INF) + 1)
    if not u.runs or u.runs[-1].state == "REQUEUED":
        spans.append((at, INF))
    blocked = W.person_holds(obs, s.key) + [W.Window(stop, INF, "cancelled")]
    blocked += [W.Window(a, b, "throttled") for a, b in _throttled(siblings, s.throttle)]
    return _minus([(a, min(b, stop)) for a, b in spans if a < min(b, stop)], blocked)


def _throttled(siblings: list[tuple[float, float]], throttle: int | None) -> list[tuple[float, float]]:
    """When ``throttle`` tasks of the array (``siblings``' runs) were running."""
    if not throttle:
        return []
    # a task counts against %N until it has completed (RELEASE_S after its end)
    points = sorted([(a, 1) for a, _ in siblings] + [(b + W.RELEASE_S, -1) for _, b in siblings])
    out, n, since = [], 0, 0.0
    for t, d in points:
        if n >= throttle and t > since:
            out.append((since, t))
        n += d
        since = t
    return out


def _minus(spans: list[tuple[float, float]], blocked: list[W.Window]) -> list[tuple[float, float]]:
    out = spans
    for w in blocked:
        nxt = []
        for a, b in out:
            if not w.overlaps(a, b):
                nxt.append((a, b))
                continue
            if a < w.start:
                nxt.append((a, w.start))
            if w.end < b:
                nxt.append((w.end, b))
        out = nxt
    return out


def idle_windows(obs: Observation) -> Iterator[IdleWindow]:
    """Every window in which a startable job fitted the free GPUs for longer than
    allowed (the longest one per job)."""
    gpn = obs.workload.gpus_per_node
    free = FreeGpus(obs)
    quiet = W.quiet_blockers(obs)
    limit = 2 * obs.poll_s
    arrays: dict[str, list[tuple[float, float]]] = {}
    for u in obs.units.values():
        if u.spec.tasks:
            arrays.setdefault(u.spec.key, []).extend(
                (r.start, r.end if r.end is not None else INF) for r in u.runs if r.start is not None
            )
    for key, u in obs.units.items():
        worst: IdleWindow | None = None
        for a, b in _minus(waiting(obs, u, arrays.get(u.spec.key, [])), quiet):
            run_from: float | None = None
            first: dict[str, int] = {}
            for s, e, f in free.segments(a, b):
                if fits(u, f, gpn):
                    if run_from is None:
                        run_from, first = s, f
                    end = e
                    continue
                if run_from is not None:
                    worst = _worse(obs, key, run_from, end, first, worst, limit)
                    run_from = None
            if run_from is not None:
                worst = _worse(obs, key, run_from, end, first, worst, limit)
        if worst is not None:
            yield worst


def _worse(
    obs: Observation, key: str, a: float, b: float, free: dict[str, int], worst: IdleWindow | None, limit: float
) -> IdleWindow | None:
    b = min(b, obs.rounds[-1] if obs.rounds else b)
    n = W.rounds_between(obs, a, b)
    if b - a <= limit or n < 3:
        return worst
    if worst is None or b - a > worst.end - worst.start:
        return IdleWindow(key, a, b, dict(free), n)
    return worst
