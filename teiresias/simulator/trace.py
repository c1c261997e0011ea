"""Tiresias trace CSV: read (with validation) and write.

The format is the public Tiresias simulator's, read unchanged so runs compare
side by side with it::

    job_id,num_gpu,submit_time,iterations,model_name,duration,interval

``duration`` is the run time in seconds when the job runs alone and
consolidated; ``interval`` is the gap to the next arrival (carried through,
unused). Optional extra columns ``user`` and ``account`` name the owner (used
by virtual clusters), ``app`` the Themis app a job belongs to
(docs/themis.md), ``elastic`` the GPU range ``MIN-MAX`` a job may be grown or
shrunk within (Gandiva grow-shrink, docs/gandiva.md; empty: fixed size),
``time_limit`` the run time in seconds the job declared (Slurm's TimeLimit;
empty: none), information the policies may use, never a duration, so it must
be at least ``duration``; any other extra column is ignored, but every row has
as many fields as the header. Times (``submit_time``, ``duration``,
``interval``, ``time_limit``) are at most ``MAX_SECONDS``.

Every problem raises :class:`TraceError` with one line ``FILE:LINE: problem``
so a user can open the file at that line.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from teiresias import yamlconf
from teiresias.domain import Cluster
from teiresias.errors import TraceError
from teiresias.outputs import Output, atomic_writer

TRACE_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval")
OPTIONAL_COLUMNS = ("user", "account", "app", "elastic", "time_limit")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace: what is known when the job is submitted (plus the oracle duration)."""

    job_id: int
    num_gpus: int
    submit_time: float
    duration: float
    model_name: str = ""
    iterations: int = 0
    interval: float = 0.0
    user: str = ""
    account: str = ""
    app: str = ""  # the Themis app (a group of related jobs); empty: derived from account and name
    elastic: str = ""  # "MIN-MAX" GPUs for grow-shrink (Gandiva); empty: fixed size
    time_limit: float | None = None  # declared run time (Slurm's TimeLimit), s; None: none

    def elastic_range(self) -> tuple[int, int] | None:
        """``elastic`` as (MIN, MAX), None when empty (read_trace checked its form)."""
        if not self.elastic:
            return None
        lo, _, hi = self.elastic.partition("-")
        return int(lo), int(hi)


# The largest time a trace may hold, in seconds (about 31.7 years; Philly's longest job
# ran 115 days). Far larger values are typos or unit mix-ups, and a simulated clock
# near them loses its resolution: at 1e300 s adding a round of 60 s changes nothing.
MAX_SECONDS = 1e9


def _num(path: Path, line: int, col: str, raw: str, *, integer: bool, minimum: float, strict: bool) -> float:
    text = (raw or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        kind = "an integer" if integer else "a number"
        raise TraceError(f"{path}:{line}: {col} must be {kind}, got {text!r}")
    if integer and value != int(value):
        raise TraceError(f"{path}:{line}: {col} must be an integer, got {text!r}")
    if value < minimum or (strict and value == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise TraceError(f"{path}:{line}: {col} must be {bound}, got {text!r}")
    if col in _SECONDS and value > MAX_SECONDS:
        raise TraceError(
            f"{path}:{line}: {col} must be <= {MAX_SECONDS:.0e} seconds (about 31 years), got {text!r}; "
            "give seconds (the Tiresias format's unit)"
        )
    return value


_SECONDS = frozenset({"submit_time", "duration", "interval"})


def read_trace(path: str | Path, cluster: Cluster | None = None) -> list[TraceJob]:
    """Read and validate a Tiresias trace; jobs come back sorted by submit time (stable).

    With ``cluster`` given, a job needing more GPUs than the cluster has is an
    error (it could never run, and the replay would never end).
    """
    p = Path(path)
    # Not-UTF-8, a directory, a byte-order mark: see teiresias/yamlconf.py.
    fh = io.StringIO(yamlconf.read_text(p, "trace", TraceError), newline="")
    jobs: list[TraceJob] = []
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise TraceError(f"{p}:1: empty trace; expected header {','.join(TRACE_COLUMNS)}")
        cols = [h.strip() for h in header]
        missing = [c for c in TRACE_COLUMNS if c not in cols]
        if missing:
            raise TraceError(f"{p}:1: missing column {', '.join(missing)}; expected header {','.join(TRACE_COLUMNS)}")
        idx = {c: cols.index(c) for c in (*TRACE_COLUMNS, *OPTIONAL_COLUMNS) if c in cols}
        seen: dict[int, int] = {}
        total = cluster.total_gpus if cluster is not None else None
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue  # blank lines (e.g. a trailing newline) carry nothing
            if len(row) != len(cols):
                # More fields than columns is as wrong as fewer (a row pasted from another
                # file, a stray comma): its extra values would be dropped without a word.
                raise TraceError(f"{p}:{line}: {len(row)} fields, header has {len(cols)}")
            get = lambda c: row[idx[c]]  # noqa: E731, B023 - used in this iteration only
            job_id = int(_num(p, line, "job_id", get("job_id"), integer=True, minimum=0, strict=False))
            if job_id in seen:
                raise TraceError(f"{p}:{line}: duplicate job_id {job_id} (first on line {seen[job_id]})")
            seen[job_id] = line
            gpus = int(_num(p, line, "num_gpu", get("num_gpu"), integer=True, minimum=0, strict=True))
            if total is not None and gpus > total:
                raise TraceError(
                    f"{p}:{line}: job {job_id} needs {gpus} GPUs but the cluster has only {total}; "
                    "use a bigger cluster spec, drop the job, or generate the trace for this cluster "
                    "(teiresias trace synth --cluster SPEC)"
                )
            submit = _num(p, line, "submit_time", get("submit_time"), integer=False, minimum=0, strict=False)
            duration = _num(p, line, "duration", get("duration"), integer=False, minimum=0, strict=True)
            iters_raw = get("iterations").strip()
            iterations = (
                int(_num(p, line, "iterations", iters_raw, integer=True, minimum=0, strict=False)) if iters_raw else 0
            )
            ivl_raw = get("interval").strip()
            interval = _num(p, line, "interval", ivl_raw, integer=False, minimum=0, strict=False) if ivl_raw else 0.0
            elastic = row[idx["elastic"]].strip() if "elastic" in idx else ""
            if elastic:
                lo, dash, hi = elastic.partition("-")
                if not (dash and lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= gpus <= int(hi)):
                    raise TraceError(
                        f"{p}:{line}: elastic {elastic!r}: expected MIN-MAX GPUs with MIN <= num_gpu"
                        f" ({gpus}) <= MAX, e.g. 1-4, or empty for a fixed-size job"
                    )
            limit_raw = row[idx["time_limit"]].strip() if "time_limit" in idx else ""
            limit = None
            if limit_raw:
                limit = _num(p, line, "time_limit", limit_raw, integer=False, minimum=0, strict=True)
                if limit < duration:
                    raise TraceError(
                        f"{p}:{line}: job {job_id}: time_limit {limit_raw} is below its duration {_fmt(duration)}"
                        " (Slurm ends a job at its limit); raise the limit, or leave it empty for none"
                    )
            jobs.append(
                TraceJob(
                    job_id=job_id,
                    num_gpus=gpus,
                    submit_time=submit,
                    duration=duration,
                    model_name=get("model_name").strip(),
                    iterations=iterations,
                    interval=interval,
                    user=row[idx["user"]].strip() if "user" in idx else "",
                    account=row[idx["account"]].strip() if "account" in idx else "",
                    app=row[idx["app"]].strip() if "app" in idx else "",
                    elastic=elastic,
                    time_limit=limit,
                )
            )
    if not jobs:
        raise TraceError(f"{p}:2: trace has a header but no jobs")
    jobs.sort(key=lambda j: j.submit_time)  # stable: trace order breaks ties
    return jobs


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3f}"


def _cell(v: object) -> str:
    """An optional column's value as written: numbers like the others, None as empty."""
    if v is None:
        return ""
    if isinstance(v, float):
        return _fmt(v)
    return str(v)


def write_trace_to(fh: IO[str], jobs: Iterable[TraceJob]) -> None:
    """Write jobs in Tiresias' format to an open text file; ``user``/``account`` only if any job has one."""
    jobs = list(jobs)
    extra = [c for c in OPTIONAL_COLUMNS if any(getattr(j, c) for j in jobs)]
    w = csv.writer(fh, lineterminator="\n")
    w.writerow([*TRACE_COLUMNS, *extra])
    for j in jobs:
        w.writerow(
            [
                j.job_id,
                j.num_gpus,
                _fmt(j.submit_time),
                j.iterations,
                j.model_name,
                _fmt(j.duration),
                _fmt(j.interval),
                *(_cell(getattr(j, c)) for c in extra),
            ]
        )


def write_trace(path: Output | str | Path, jobs: Iterable[TraceJob]) -> None:
    """Write jobs in Tiresias' format to ``path`` atomically (nothing half-written; teiresias/outputs.py)."""
    with atomic_writer(path) as fh:
        write_trace_to(fh, jobs)
