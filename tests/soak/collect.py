"""What the checker reads, gathered from one run folder (tests/soak/driver.py):
sacct's runs, the driver's log, the controller's audit log, state DB and
rounds, and the rival controller's audit log. ``Observation`` is plain data,
so tests/soak/test_invariants.py builds them by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_plugin.backends.parse import expand_hostlist, gres_count
from slurm_plugin.controller.audit import read_audit
from slurm_plugin.controller.state import StateStore
from tests.soak.workload import FAULTS, Action, JobSpec, Workload, generate


@dataclass(frozen=True)
class Run:
    """One run of a job as sacct recorded it (``sacct -D``: a requeued run is a row)."""

    sacct_id: str  # "12", "6_4" (array task), "4+0" (hetjob component)
    raw: int
    state: str  # COMPLETED, REQUEUED, FAILED, CANCELLED, TIMEOUT, RUNNING, ...
    submit: float
    start: float | None
    end: float | None
    nodes: tuple[str, ...] = ()
    gpus: int = 0
    exit_code: int = 0
    exit_signal: int = 0

    @property
    def elapsed(self) -> float:
        return (self.end - self.start) if self.start is not None and self.end is not None else 0.0


@dataclass(frozen=True)
class Event:
    """One line of the driver's log."""

    t: float  # when the command returned (wall clock)
    what: str  # submit | hold | release | cancel | ungpu | fault | fault-end | drain | end-cancel | ...
    key: str = ""
    job: str = ""
    ok: bool = True
    by: str = ""
    fault: str = ""
    node: str = ""
    t0: float | None = None  # when the command began
    line: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """The controller's record of one job at the end (state DB), with its run segments."""

    job_id: int
    gpus: int
    final_state: str | None
    first_start_time: float | None
    closed_run_seconds: float
    preemptions: int
    segments: tuple[tuple[int, float, float, str], ...] = ()  # (restart count, start, end, source)
    archived: int = 0  # older records of this id moved aside ("replaced")


@dataclass
class Unit:
    """One job the controller schedules: a plain job, one array task, or a hetjob."""

    key: str  # "j12", or "j21_3" for task 3 of array j21
    spec: JobSpec
    sacct_id: str = ""  # "12", "6_3", "16" (a hetjob: its first component's id without +0)
    runs: list[Run] = field(default_factory=list)

    @property
    def raw(self) -> int | None:
        return self.runs[0].raw if self.runs else (int(self.sacct_id) if self.sacct_id.isdigit() else None)


@dataclass
class Observation:
    seed: int
    workload: Workload
    poll_s: float
    grace_s: float
    events: list[Event] = field(default_factory=list)
    units: dict[str, Unit] = field(default_factory=dict)
    rows: list[Run] = field(default_factory=list)  # every sacct row of the run's jobs (hetjob components too)
    audit: list[dict[str, Any]] = field(default_factory=list)
    records: dict[int, Record] = field(default_factory=dict)
    rounds: list[float] = field(default_factory=list)  # the controller's round times (its Slurm polls)
    rival_audit: list[dict[str, Any]] = field(default_factory=list)
    lines: dict[str, str] = field(default_factory=dict)  # key -> the submitting command line

    @property
    def started(self) -> float:
        return next((e.t for e in self.events if e.what == "start"), 0.0)


def _epoch(v: str) -> float | None:
    return float(v) if v and v not in ("Unknown", "None") and v.lstrip("-").isdigit() else None


def parse_sacct(text: str) -> list[Run]:
    """``sacct -D -n -P -o driver.SACCT_FIELDS`` with SLURM_TIME_FORMAT=%s: one Run per
    allocation row. A run whose batch step ended on its own (COMPLETED, FAILED) before
    the row's End ended then: an admin's `scontrol requeue` of a job that had ended
    makes Slurm stamp the requeue time as that run's End (its GPUs were free between;
    the soak, seed 20: j11's run of 24 s shown as 28 s)."""
    out: list[Run] = []
    for line in text.splitlines():
        f = line.split("|", 11)
        if len(f) >= 11 and f[1].endswith(".batch") and out and f[1] == f"{out[-1].raw}.batch":
            end, last = _epoch(f[6]), out[-1]
            if f[3].split(" ")[0] in ("COMPLETED", "FAILED") and end is not None and last.end is not None:
                if last.state == "REQUEUED" and end < last.end:
                    out[-1] = replace(last, end=end)
            continue
        if len(f) < 11 or not f[1].isdigit():
            continue
        code, _, sig = f[10].partition(":")
        nodes = expand_hostlist(f[8]) if f[8] != "None assigned" else ()
        out.append(
            Run(
                sacct_id=f[0],
                raw=int(f[1]),
                state=f[3].split()[0] if f[3] else "",
                submit=_epoch(f[4]) or 0.0,
                # Slurm stamps a job cancelled while pending with Start = End: no run
                start=_epoch(f[5]) if nodes else None,
                end=_epoch(f[6]),
                nodes=nodes,
                gpus=gres_count(f[9]),
                exit_code=int(code) if code.isdigit() else 0,
                exit_signal=int(sig) if sig.isdigit() else 0,
            )
        )
    return out


def read_events(path: Path) -> list[Event]:
    known = {"t", "what", "key", "job", "ok", "by", "fault", "node", "t0", "line"}
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        d = json.loads(line)
        out.append(
            Event(
                t=d["t"],
                what=d["what"],
                key=d.get("key", ""),
                job=str(d.get("job", "")),
                ok=bool(d.get("ok", True)),
                by=d.get("by", ""),
                fault=d.get("fault", ""),
                node=d.get("node", ""),
                t0=d.get("t0"),
                line=d.get("line", ""),
                extra={k: v for k, v in d.items() if k not in known},
            )
        )
    return out


def read_records(db: Path) -> dict[int, Record]:
    if not db.exists():
        return {}
    store = StateStore(db, readonly_copy=True)
    try:
        return {
            j: Record(
                job_id=j,
                gpus=r.gpus,
                final_state=r.final_state,
                first_start_time=r.first_start_time,
                closed_run_seconds=r.closed_run_seconds,
                preemptions=r.preemptions,
                segments=tuple(store.segments(j)),
                archived=len(store.archived(j)),
            )
            for j, r in store.jobs(active_only=False).items()
        }
    finally:
        store.close()


def read_rounds(path: Path) -> list[float]:
    out = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            out.append(float(json.loads(line)["time"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by kill -9
    return sorted(out)


def build_units(workload: Workload, events: list[Event], rows: list[Run]) -> dict[str, Unit]:
    """The run's jobs by key, each with its sacct runs in order."""
    ids = {e.key: e.job for e in events if e.what == "submit" and e.ok}
    by_id: dict[str, list[Run]] = {}
    for r in rows:
        by_id.setdefault(r.sacct_id, []).append(r)
    units: dict[str, Unit] = {}
    for key, spec in workload.jobs.items():
        job = ids.get(key, "")
        if spec.tasks:
            for t in spec.tasks:
                sid = f"{job}_{t}" if job else ""
                units[f"{key}_{t}"] = Unit(f"{key}_{t}", spec, sid, by_id.get(sid, []) if job else [])
        elif spec.kind == "hetjob":
            units[key] = Unit(key, spec, job, by_id.get(f"{job}+0", []) if job else [])
        else:
            units[key] = Unit(key, spec, job, by_id.get(job, []) if job else [])
    for u in units.values():
        u.runs.sort(key=lambda r: (r.submit, r.start or 0.0))
    return units


def workload_from_json(d: dict[str, Any]) -> Workload:
    """A Workload as driver.py saved it (``dataclasses.asdict``)."""

    def spec(j: dict[str, Any]) -> JobSpec:
        tuples = {k: tuple(v) for k, v in j.items() if isinstance(v, list)}
        return JobSpec(**{**j, **tuples})

    return Workload(
        seed=d["seed"],
        duration_s=d["duration_s"],
        nodes=tuple(d["nodes"]),
        gpus_per_node=d["gpus_per_node"],
        jobs={k: spec(j) for k, j in d["jobs"].items()},
        actions=tuple(Action(**a) for a in d["actions"]),
        args=d.get("args", {}),
    )


def load(run_dir: Path) -> Observation:
    """The Observation of a finished run folder (its workload regenerated from params.json)."""
    params = json.loads((run_dir / "params.json").read_text())
    w = params["workload"]
    saved = run_dir / "workload.json"
    workload = (
        workload_from_json(json.loads(saved.read_text()))
        if saved.exists()
        else generate(
            w["seed"],
            duration_s=w["duration_s"],
            jobs=w["jobs"],
            torch_jobs=w["torch_jobs"],
            faults=w["faults"],
            fault_kinds=tuple(w.get("fault_kinds", FAULTS)),
            nodes=w["nodes"],
            gpus_per_node=w["gpus_per_node"],
        )
    )
    events = read_events(run_dir / "driver.jsonl")
    rows = parse_sacct((run_dir / "sacct.txt").read_text()) if (run_dir / "sacct.txt").exists() else []
    ctl = run_dir / "controller"
    return Observation(
        seed=w["seed"],
        workload=workload,
        poll_s=params["config"]["poll_interval"],
        grace_s=params["config"]["grace_s"],
        events=events,
        units=build_units(workload, events, rows),
        rows=rows,
        audit=read_audit(ctl / "audit.jsonl"),
        records=read_records(ctl / "state.db"),
        rounds=read_rounds(ctl / "rounds.jsonl"),
        rival_audit=read_audit(run_dir / "rival" / "audit.jsonl"),
        lines={e.key: e.line for e in events if e.what == "submit" and e.line},
    )
