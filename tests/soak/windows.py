"""Time windows the soak's invariants share: when faults and preemptions were in
flight (no promptness is asked of the controller then), when a person held a
job, and which GPUs each run held on which node. Pure functions of an
Observation (tests/soak/collect.py)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from tests.soak.collect import Event, Observation, Run, Unit

# Slurm's times are whole seconds (an end read as T happened in [T, T+1)), and a node
# stays COMPLETING for KillWait (2 s on the local cluster) after a requeue or a cancel.
RELEASE_S = 2.0


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    why: str

    def overlaps(self, a: float, b: float) -> bool:
        return self.start < b and a < self.end


def rounds_after(obs: Observation, t: float, n: int) -> float | None:
    """The time of the ``n``-th controller round polled after ``t`` (None: fewer happened)."""
    i = bisect.bisect_right(obs.rounds, t)
    return obs.rounds[i + n - 1] if i + n - 1 < len(obs.rounds) else None


def rounds_between(obs: Observation, a: float, b: float) -> int:
    return bisect.bisect_left(obs.rounds, b) - bisect.bisect_right(obs.rounds, a)


def fault_windows(obs: Observation) -> list[Window]:
    """Faults that stop the controller or Slurm (or add a rival): from the fault until
    two polls after the first round that followed its end. A drain is per node
    (:func:`drained`), not here."""
    out = []
    begun: dict[str, Event] = {}
    for e in obs.events:
        if e.what == "fault" and e.fault != "drain":
            begun[e.fault] = e
        elif e.what == "fault-end" and e.fault in begun:
            b = begun.pop(e.fault)
            back = rounds_after(obs, e.t, 1) or e.t
            out.append(Window(b.t0 or b.t, back + 2 * obs.poll_s, e.fault))
    for fault, b in begun.items():  # never ended: to the end of the run
        out.append(Window(b.t0 or b.t, float("inf"), fault))
    return out


def drained(obs: Observation) -> dict[str, list[Window]]:
    """Node -> when it was drained (from the drain command until its resume, plus RELEASE_S)."""
    out: dict[str, list[Window]] = {}
    begun: dict[str, Event] = {}
    for e in obs.events:
        if e.fault == "drain" and e.what == "fault":
            begun[e.node] = e
        elif e.fault == "drain" and e.what == "fault-end" and e.node in begun:
            b = begun.pop(e.node)
            out.setdefault(e.node, []).append(Window(b.t0 or b.t, e.t + RELEASE_S, "drained"))
    for node, b in begun.items():
        out.setdefault(node, []).append(Window(b.t0 or b.t, float("inf"), "drained"))
    return out


def preemptions_in_flight(obs: Observation) -> list[Window]:
    """From each checkpoint signal to its job's requeue (or end), and each plain
    job's requeue, until the GPUs are free again (RELEASE_S)."""
    out = []
    open_: dict[int, float] = {}
    for e in obs.audit:
        job, act = e.get("job"), e.get("action")
        if job is None:
            continue
        if act == "signal":
            open_[job] = e["time"]
        elif act in ("requeue", "recover-requeue") or (act == "finished" and job in open_):
            t0 = open_.pop(job, e["time"])
            out.append(Window(t0, e["time"] + RELEASE_S, f"preemption of job {job}"))
    for job, t0 in open_.items():
        out.append(Window(t0, float("inf"), f"preemption of job {job}"))
    return out


def quiet_blockers(obs: Observation) -> list[Window]:
    """When nobody may ask the controller to be prompt: faults, preemptions in flight,
    before its first rounds, and after the driver stopped waiting (the end's cancels)."""
    first = obs.rounds[0] if obs.rounds else obs.started
    out = [Window(0.0, first + 2 * obs.poll_s, "controller starting"), *fault_windows(obs)]
    out += preemptions_in_flight(obs)
    drained_at = next((e.t for e in obs.events if e.what == "drained"), None)
    if drained_at is not None:
        out.append(Window(drained_at, float("inf"), "end of the run"))
    return out


def person_holds(obs: Observation, key: str) -> list[Window]:
    """When a person (its owner or an admin; ``-H`` at submission) held the job of
    ``key``: from the hold until the release command began (inf: never released)."""
    out = []
    since: float | None = None
    for e in obs.events:
        if e.key != key or not e.ok:
            continue
        if e.what == "submit" and obs.workload.jobs[key].held:
            since = e.t0 or e.t
        elif e.what == "hold" and since is None:
            since = e.t
        elif e.what == "release" and since is not None:
            out.append(Window(since, e.t0 or e.t, f"held by {'its owner' if e.by == 'owner' else 'an admin'}"))
            since = None
    if since is not None:
        out.append(Window(since, float("inf"), "held by a person"))
    return out


def event(obs: Observation, key: str, what: str) -> Event | None:
    """The first successful ``what`` of ``key`` in the driver's log."""
    return next((e for e in obs.events if e.key == key and e.what == what and e.ok), None)


def end_cancel(obs: Observation, key: str) -> Event | None:
    return next((e for e in obs.events if e.key == key and e.what == "end-cancel"), None)


@dataclass
class Index:
    """Look-ups the checks share, built once per check (``index``): a long run has
    thousands of jobs and tens of thousands of audit lines."""

    by_raw: dict[int, Unit]  # Slurm's raw job id -> its unit (a hetjob's components both)
    rows_by_raw: dict[int, list[Run]]
    audit_by_job: dict[int, list[dict]]  # in the log's order
    starts: list[dict]  # every audit ``start``, by time
    start_times: list[float]
    rows_by_start: list[Run]  # every run that started, by start
    row_starts: list[float]

    def audit_of(self, job: int, *actions: str, after: float = -float("inf")) -> list[dict]:
        return [
            e for e in self.audit_by_job.get(job, []) if e["time"] >= after and (not actions or e["action"] in actions)
        ]

    def started_between(self, a: float, b: float) -> list[Run]:
        return self.rows_by_start[bisect.bisect_left(self.row_starts, a) : bisect.bisect_right(self.row_starts, b)]


def index(obs: Observation, rebuild: bool = False) -> Index:
    """The Observation's Index (kept on it; ``rebuild`` after it changed)."""
    got = obs.__dict__.get("_index")
    if got is not None and not rebuild:
        return got
    obs.__dict__.pop("_free", None)  # idle.FreeGpus, built from the same data
    by_raw: dict[int, Unit] = {}
    by_sacct = {u.sacct_id: u for u in obs.units.values() if u.sacct_id}
    for u in obs.units.values():
        for r in u.runs:
            by_raw[r.raw] = u
        if u.raw is not None:
            by_raw.setdefault(u.raw, u)
    rows_by_raw: dict[int, list[Run]] = {}
    for r in obs.rows:
        rows_by_raw.setdefault(r.raw, []).append(r)
        if "+" in r.sacct_id and r.sacct_id.split("+")[0] in by_sacct:
            by_raw.setdefault(r.raw, by_sacct[r.sacct_id.split("+")[0]])
    audit_by_job: dict[int, list[dict]] = {}
    for e in obs.audit:
        if e.get("job") is not None:
            audit_by_job.setdefault(e["job"], []).append(e)
    starts = sorted((e for e in obs.audit if e.get("action") == "start"), key=lambda e: e["time"])
    started = sorted((r for r in obs.rows if r.start is not None), key=lambda r: r.start or 0.0)
    got = Index(
        by_raw,
        rows_by_raw,
        audit_by_job,
        starts,
        [e["time"] for e in starts],
        started,
        [r.start or 0.0 for r in started],
    )
    obs.__dict__["_index"] = got
    return got


def unit_of_raw(obs: Observation) -> dict[int, Unit]:
    """Slurm's raw job id -> the unit (a hetjob's components both map to it)."""
    return index(obs).by_raw


def split(obs: Observation, run: Run, unit: Unit | None) -> dict[str, int]:
    """GPUs per node a run held. Known for one node, a job that asked per node, or a
    run the controller placed (its audit ``start``: nodes and GPUs each); otherwise
    every GPU of its nodes is counted as held (the safe side for idle-GPU checks)."""
    if len(run.nodes) == 1:
        return {run.nodes[0]: run.gpus}
    gpn = obs.workload.gpus_per_node
    if unit is not None and unit.spec.per_node and unit.spec.kind != "hetjob":
        return {n: unit.spec.per_node for n in run.nodes}
    for e in index(obs).audit_of(run.raw, "start"):
        if sorted(e.get("nodes", [])) == sorted(run.nodes):
            placed = dict(zip(e["nodes"], e["gpus"]))
            if sum(placed.values()) == run.gpus:
                return placed
    return {n: gpn for n in run.nodes}
