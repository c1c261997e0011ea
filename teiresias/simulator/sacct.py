"""Turn a site's Slurm accounting (``sacct --json`` or ``sacct --parsable2``)
into a Tiresias trace, so that ``teiresias simulate`` replays the site's own
history under other policies.

Pure: text in, :class:`SacctTrace` out (no subprocess, no clock). The rules
(docs/simulator.md, "Replaying a site's history"):

- one trace row per Slurm job that held GPUs and ran for at least a second:
  ``num_gpu`` from the allocated TRES (``gres/gpu``), ``submit_time`` in
  seconds after the earliest submission kept, ``duration`` the run time
  (Slurm's ``elapsed``: start to end, suspended time excluded),
  ``model_name`` the job name, ``user`` and ``account`` as recorded,
  ``time_limit`` the last run's limit (``TimelimitRaw`` / JSON ``time.limit``,
  minutes; none when unlimited or not listed), raised to the run time where
  the job ran past it (Slurm's OverTimeLimit, or runs summed after requeues);
- a requeued job is one row: Slurm writes one record per run, the earlier
  ones in state ``REQUEUED``. Its submit time is the first record's (the
  last record's submission is the requeue time), its GPUs the last run's,
  and its duration the runs' sum (``requeued="sum"``: the GPU time the job
  really needed, right for checkpointing jobs) or the last run alone
  (``"last"``: for jobs that restart from scratch);
- left out, and counted: jobs without GPUs, jobs that never started or ran
  under a second, jobs not finished yet (running, pending, or requeued and
  waiting), job steps (``123.batch``, only listed by ``--parsable2``
  without ``-X``).

Every problem raises :class:`TraceError` with one line naming the input (and
line, for ``--parsable2``).
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from teiresias.errors import TraceError
from teiresias.simulator.trace import TraceJob

REQUEUED_CHOICES = ("sum", "last")
# Columns ``--parsable2`` output must have (JobID may stand in for JobIDRaw).
PARSABLE_REQUIRED = ("State", "Submit", "Start", "End", "AllocTRES")
SACCT_PARSABLE_FIELDS = "JobIDRaw,Cluster,JobName,User,Account,State,Submit,Start,End,Elapsed,AllocTRES,TimelimitRaw"
_UNSET = {"", "unknown", "none", "n/a", "invalid"}
_ELAPSED_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_JOBID_RE = re.compile(r"^(\d+)$")


@dataclass(frozen=True, slots=True)
class SacctRecord:
    """One accounting record: one run of one job."""

    cluster: str
    job_id: int
    name: str
    user: str
    account: str
    state: str  # first word, upper case: "COMPLETED", "CANCELLED", "REQUEUED", ...
    submit: float | None  # epoch seconds (JSON) or naive local time read as UTC (parsable2)
    start: float | None
    end: float | None
    elapsed: float | None
    gpus: int
    where: str  # "FILE:LINE" or "FILE: job N", for messages
    time_limit: float | None = None  # seconds; None: unlimited or not listed

    @property
    def requeued(self) -> bool:
        return self.state.startswith("REQUEUE")

    @property
    def ran(self) -> float:
        """Seconds this run held its allocation (0 when it never started or is still running)."""
        if self.start is None or self.end is None or self.end < self.start:
            return 0.0
        return self.elapsed if self.elapsed is not None else self.end - self.start


@dataclass
class SacctTrace:
    """The converted trace, and what was left out and why."""

    jobs: list[TraceJob]
    format: str  # "json" or "parsable2"
    origin: float  # the earliest submission kept (submit_time 0), epoch seconds
    records: int  # allocation records read (job steps not counted)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> jobs
    requeued_jobs: int = 0  # jobs with more than one run, merged into one row each
    renumbered: bool = False  # Slurm ids were not unique (several clusters, reused ids)
    # Slurm ids of kept jobs whose record names no user: sacct --json (22.05) writes
    # user null, and no uid, for a user without an association (--parsable2 names them).
    no_user: tuple[int, ...] = ()


def _fail(source: str, msg: str) -> TraceError:
    return TraceError(f"{source}: {msg}")


# ------------------------------------------------------------------ JSON


def _json_mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object, or an empty one for anything else (a field missing or of another type)."""
    return value if isinstance(value, Mapping) else {}


def _json_number(value: Any) -> float | None:
    """A time or count: a plain number (22.05) or ``{"set", "infinite",
    "number"}`` (the OpenAPI v0.0.39+ shape); 0 and unset mean "not known"."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value > 0 else None


def _minutes(value: float | None) -> float | None:
    """A time limit in minutes (sacct's unit) as seconds; None stays None, as does 0."""
    return value * 60.0 if value else None


def _json_gpus(tres: Any) -> int:
    """GPUs of an ``allocated`` TRES list: the untyped ``gres/gpu`` entry (the
    total) when present, else the sum of typed ones (``gpu:a100``)."""
    total, typed = None, 0
    for t in tres if isinstance(tres, list) else []:
        if not isinstance(t, Mapping) or t.get("type") != "gres":
            continue
        name, count = t.get("name") or "", _json_number(t.get("count")) or 0
        if name == "gpu":
            total = int(count)
        elif name.startswith("gpu:"):
            typed += int(count)
    return total if total is not None else typed


def _json_state(state: Any) -> str:
    cur = state.get("current") if isinstance(state, Mapping) else state
    if isinstance(cur, list):  # v0.0.39+: a list of flags, the base state first
        cur = cur[0] if cur else ""
    return str(cur or "").split()[0].upper() if str(cur or "").strip() else ""


def _json_records(data: Any, source: str, users: Mapping[int, str] | None = None) -> list[SacctRecord]:
    if not isinstance(data, Mapping) or not isinstance(data.get("jobs"), list):
        raise _fail(source, "no 'jobs' list: not `sacct --json` output (run sacct --json ... > FILE)")
    errors = data.get("errors")
    if errors and not data["jobs"]:
        first = errors[0]
        why = first.get("error") or first.get("description") if isinstance(first, Mapping) else first
        raise _fail(source, f"sacct reported an error and no jobs: {why}")
    out = []
    for k, job in enumerate(data["jobs"]):
        if not isinstance(job, Mapping) or not isinstance(job.get("job_id"), int):
            raise _fail(source, f"jobs[{k}] has no integer job_id: not `sacct --json` output")
        t = _json_mapping(job.get("time"))
        tres = _json_mapping(job.get("tres"))
        assoc = _json_mapping(job.get("association"))
        out.append(
            SacctRecord(
                cluster=str(job.get("cluster") or assoc.get("cluster") or ""),
                job_id=job["job_id"],
                name=str(job.get("name") or ""),
                user=str(job.get("user") or assoc.get("user") or (users or {}).get(job["job_id"], "")),
                account=str(job.get("account") or assoc.get("account") or ""),
                state=_json_state(job.get("state")),
                submit=_json_number(t.get("submission")),
                start=_json_number(t.get("start")),
                end=_json_number(t.get("end")),
                elapsed=_json_number(t.get("elapsed")),
                gpus=_json_gpus(tres.get("allocated")),
                where=f"{source}: job {job['job_id']}",
                time_limit=_minutes(_json_number(t.get("limit"))),
            )
        )
    return out


# ------------------------------------------------------------------ --parsable2


def _time(text: str, col: str, where: str) -> float | None:
    text = text.strip()
    if text.lower() in _UNSET:
        return None
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(f"{where}: {col} {text!r} is not a time like 2024-05-01T13:45:00") from None
    # sacct prints local time without a zone; only differences matter, so
    # read every time the same way (an hour off across a DST change: use --json)
    return float(calendar.timegm(dt.timetuple()))


def parse_elapsed(text: str) -> float | None:
    """``[D-][HH:]MM:SS[.fff]`` (sacct's Elapsed) in seconds; None when unset."""
    text = text.strip()
    if text.lower() in _UNSET:
        return None
    m = _ELAPSED_RE.match(text)
    if not m:
        raise ValueError(text)
    days, hours, minutes, seconds = m.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def parse_tres_gpus(text: str) -> int:
    """GPUs in a TRES string (``billing=1,cpu=1,gres/gpu=4,node=1``): the
    untyped ``gres/gpu`` (the total) when present, else the typed ones summed."""
    total, typed = None, 0
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or not key.startswith("gres/gpu"):
            continue
        try:
            n = int(float(value))
        except ValueError:
            raise ValueError(item) from None
        if key == "gres/gpu":
            total = n
        elif key.startswith("gres/gpu:"):
            typed += n
    return total if total is not None else typed


def _parsable_records(text: str, source: str) -> tuple[list[SacctRecord], int]:
    """Records of ``--parsable2`` output, and the number of job-step rows skipped."""
    lines = text.splitlines()
    first = next(n for n, line in enumerate(lines) if line.strip())
    header = [h.strip() for h in lines[first].split("|")]
    missing = [c for c in PARSABLE_REQUIRED if c not in header]
    if "JobIDRaw" not in header and "JobID" not in header:
        missing.insert(0, "JobIDRaw")
    if missing:
        raise _fail(
            f"{source}:{first + 1}",
            f"missing sacct field {', '.join(missing)}; run sacct -a -X -D --parsable2 -o {SACCT_PARSABLE_FIELDS}",
        )
    idx = {c: i for i, c in enumerate(header)}
    id_col = "JobIDRaw" if "JobIDRaw" in idx else "JobID"
    out, steps = [], 0
    for n, line in enumerate(lines[first + 1 :], start=first + 2):
        if not line.strip():
            continue
        row = line.split("|")
        where = f"{source}:{n}"
        if len(row) < len(header):
            raise TraceError(f"{where}: {len(row)} fields, the header has {len(header)}")
        get = lambda c: row[idx[c]].strip() if c in idx else ""  # noqa: E731, B023 - used in this iteration only
        raw_id = get(id_col)
        if "." in raw_id:
            steps += 1  # 123.batch, 123.0, 123.extern: steps of an allocation listed above
            continue
        m = _JOBID_RE.match(raw_id)
        if not m:
            hint = " (use JobIDRaw: array and het jobs print 123_4 / 123+0 under JobID)" if id_col == "JobID" else ""
            raise TraceError(f"{where}: {id_col} {raw_id!r} is not a job number{hint}")
        try:
            elapsed = parse_elapsed(get("Elapsed")) if "Elapsed" in idx else None
        except ValueError:
            raise TraceError(f"{where}: Elapsed {get('Elapsed')!r} is not [D-]HH:MM:SS") from None
        try:
            gpus = parse_tres_gpus(get("AllocTRES"))
        except ValueError as exc:
            raise TraceError(f"{where}: AllocTRES item {exc} has no number") from None
        limit_raw = get("TimelimitRaw")
        try:
            # Minutes; "UNLIMITED" and "Partition_Limit" say nothing about the job.
            limit = _minutes(float(limit_raw)) if limit_raw and limit_raw[0].isdigit() else None
        except ValueError:
            raise TraceError(f"{where}: TimelimitRaw {limit_raw!r} is not a number of minutes") from None
        state = get("State").split()
        out.append(
            SacctRecord(
                cluster=get("Cluster"),
                job_id=int(m.group(1)),
                name=get("JobName"),
                user=get("User"),
                account=get("Account"),
                state=state[0].upper() if state else "",
                submit=_time(get("Submit"), "Submit", where),
                start=_time(get("Start"), "Start", where),
                end=_time(get("End"), "End", where),
                elapsed=elapsed,
                gpus=gpus,
                where=where,
                time_limit=limit,
            )
        )
    return out, steps


# ------------------------------------------------------------------ records -> trace


def _group(records: Iterable[SacctRecord]) -> tuple[list[list[SacctRecord]], int]:
    """Runs of one job together, in order; and the number of jobs left unfinished.

    Records of one (cluster, id) in order of their runs: every REQUEUED
    record belongs to the next record that is not REQUEUED, which closes the
    job (a second closing record is a later job that reused the id). REQUEUED
    records with nothing after them: the job is waiting to run again.
    """
    by_id: dict[tuple[str, int], list[SacctRecord]] = {}
    for r in records:
        by_id.setdefault((r.cluster, r.job_id), []).append(r)
    jobs, unfinished = [], 0
    for recs in by_id.values():
        # stable: sacct lists a job's runs in order; never-started records sort by submit
        recs.sort(key=lambda r: r.start if r.start is not None else (r.submit or 0.0))
        runs: list[SacctRecord] = []
        for r in recs:
            runs.append(r)
            if not r.requeued:
                jobs.append(runs)
                runs = []
        if runs:
            unfinished += 1
    return jobs, unfinished


def convert_records(
    records: list[SacctRecord], fmt: str, source: str, requeued: str = "sum", steps: int = 0
) -> SacctTrace:
    if requeued not in REQUEUED_CHOICES:
        raise TraceError(f"requeued must be one of {', '.join(REQUEUED_CHOICES)}, got {requeued!r}")
    groups, unfinished = _group(records)
    skipped = {"unfinished": unfinished, "no GPUs": 0, "never ran": 0}
    kept: list[tuple[list[SacctRecord], float, float]] = []  # runs, submit, duration
    for runs in groups:
        last = runs[-1]
        if last.end is None or last.state in ("RUNNING", "PENDING", "SUSPENDED"):
            skipped["unfinished"] += 1
            continue
        if last.gpus <= 0:
            skipped["no GPUs"] += 1
            continue
        duration = sum(r.ran for r in runs) if requeued == "sum" else last.ran
        submits = [r.submit for r in runs if r.submit is not None]
        if duration < 1 or not submits:
            skipped["never ran"] += 1  # the trace needs a positive run time
            continue
        kept.append((runs, min(submits), duration))
    if steps:
        skipped["job steps"] = steps
    skipped = {k: v for k, v in skipped.items() if v}
    if not kept:
        left = ", ".join(f"{v} {k}" for k, v in skipped.items()) or "no jobs at all"
        raise _fail(
            source,
            f"no finished GPU jobs to convert ({left}); give sacct a time range "
            "with GPU jobs (-S/-E) and all users (-a)",
        )
    kept.sort(key=lambda k: (k[1], k[0][-1].job_id))
    origin = kept[0][1]
    ids = [runs[-1].job_id for runs, _, _ in kept]
    renumbered = len(set(ids)) != len(ids)
    jobs = [
        TraceJob(
            job_id=(n if renumbered else runs[-1].job_id),
            num_gpus=runs[-1].gpus,
            submit_time=submit - origin,
            duration=duration,
            model_name=runs[-1].name,
            user=runs[-1].user,
            account=runs[-1].account,
            time_limit=None if runs[-1].time_limit is None else max(runs[-1].time_limit, duration),
        )
        for n, (runs, submit, duration) in enumerate(kept, start=1)
    ]
    return SacctTrace(
        jobs=jobs,
        format=fmt,
        origin=origin,
        records=len(records),
        skipped=skipped,
        requeued_jobs=sum(1 for runs, _, _ in kept if len(runs) > 1),
        renumbered=renumbered,
        no_user=tuple(sorted({runs[-1].job_id for runs, _, _ in kept if not runs[-1].user})),
    )


def parse_sacct(text: str, source: str, requeued: str = "sum", users: Mapping[int, str] | None = None) -> SacctTrace:
    """Convert ``sacct --json`` or ``sacct --parsable2`` output (told apart by
    its first character) into a trace. ``source`` names the input in errors.
    ``users``: Slurm job id -> user for the JSON records that name none
    (``SacctTrace.no_user``; the CLI asks ``sacct --parsable2`` for them)."""
    body = text.lstrip()
    if not body:
        raise _fail(source, "empty; expected the output of sacct --json or sacct --parsable2")
    if body.startswith("{"):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise _fail(f"{source}:{exc.lineno}", f"not valid JSON ({exc.msg}); expected sacct --json output") from None
        return convert_records(_json_records(data, source, users), "json", source, requeued)
    lines = text.splitlines()
    n, first = next((n, line) for n, line in enumerate(lines, start=1) if line.strip())
    if "|" not in first:
        raise _fail(
            f"{source}:{n}",
            "not sacct output: expected sacct --json, or sacct --parsable2 with its "
            f"header line (-o {SACCT_PARSABLE_FIELDS})",
        )
    records, steps = _parsable_records(text, source)
    return convert_records(records, "parsable2", source, requeued, steps)
