"""The cheap job poll: ``squeue -O`` with the fields the controller reads.

Slurm 22.05's ``squeue --json`` fills ~100 fields for every job and ignores
squeue's filters: with 1,000 jobs it prints 2.6 MB and takes 0.35-0.6 s, nearly
all of it inside squeue building JSON. The same jobs through ``squeue -O``
with a field list take 30-45 ms (docs/benchmarks.md, "Controller round time
and Slurm poll time"). Three things the controller reads are not among
squeue's fields; each comes from where Slurm does print it:

- a job's excluded nodes (``-x``): ``squeue -o %x``, a second call made at the
  same time as the first (``EXCLUDED_FORMAT``);
- the GPU indices a running job holds (``gres_detail``): fixed for a run, read
  once per run with ``scontrol -d show job`` (``run_key`` says which run);
- an array's throttle (``%N``): the array's meta record shows it in its task
  string (``0-19%4``) while tasks are left to split off; a split task takes its
  array's, learned from the meta record or from ``scontrol show job``
  (ArrayTaskThrottle).

Each job's values are mapped onto the openapi keys ``parse.parse_job`` reads,
so both polls derive a SlurmJob by the very same code (held, GPUs, shards,
types, array tasks); tests/unit/test_slurm_parse_fields.py checks every field
against ``squeue --json`` on captured real output. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.backends.parse import (
    expand_hostlist,
    parse_job,
    parse_scontrol_kv,
)

# Field and record ends: control characters no job name, comment or command holds in
# practice. A record whose field count is wrong is read with scontrol instead.
SEP = "\x1f"
END = "\x1e"

# (squeue -O field, openapi key). ``:0`` asks for the whole value (no 20-character cut).
FIELDS: tuple[tuple[str, str], ...] = (
    ("JobID", "job_id"),
    ("ArrayJobID", "array_job_id"),
    ("ArrayTaskID", "array_task_id"),
    ("HetJobID", "het_job_id"),
    ("State", "job_state"),
    ("Reason", "state_reason"),
    ("PriorityLong", "priority"),
    ("RestartCnt", "restart_cnt"),
    ("Requeue", "requeue"),
    ("SubmitTime", "submit_time"),
    ("EligibleTime", "eligible_time"),
    ("StartTime", "start_time"),
    ("EndTime", "end_time"),
    ("TimeLimit", "time_limit"),
    ("NumNodes", "node_count"),
    ("NumTasks", "tasks"),
    ("NodeList", "nodes"),
    ("ReqNodes", "required_nodes"),
    ("Partition", "partition"),
    ("UserName", "user_name"),
    ("Account", "account"),
    ("tres-per-job", "tres_per_job"),
    ("tres-per-node", "tres_per_node"),
    ("tres-per-task", "tres_per_task"),
    ("tres-per-socket", "tres_per_socket"),
    ("Feature", "features"),
    ("Dependency", "dependency"),
    ("admin_comment", "admin_comment"),
    ("Name", "name"),
    ("Comment", "comment"),
    ("Command", "command"),
)
FORMAT = ",".join(f"{f}:0{SEP}" for f, _ in FIELDS[:-1]) + f",{FIELDS[-1][0]}:0{END}"
# ``%A`` the job id (an array's meta record: its own id), ``%x`` its excluded nodes.
EXCLUDED_FORMAT = f"%A{SEP}%x{END}"


def poll_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the poll's squeue: times as Unix seconds (strftime's %s); an
    array's whole task set (squeue, and squeue --json, cut it at 64 characters, ``...``,
    unless SLURM_BITSTR_LEN is 0: a sparse array's later tasks would go unseen); and
    none of the SQUEUE_* defaults a site or user may set (SQUEUE_ARRAY would unfold
    meta records, SQUEUE_SORT reorder nothing that matters, but they are not ours)."""
    out = {k: v for k, v in env.items() if not k.startswith("SQUEUE_")}
    out.update(SLURM_TIME_FORMAT="%s", SLURM_BITSTR_LEN="0")
    return out


def squeue_args() -> list[str]:
    """The poll's squeue command: every job in every state (finished ones younger than
    MinJobAge too, as ``squeue --json`` shows them), hidden partitions included, one
    line per job record: ``--array-unique`` keeps an array's meta record one line (its
    tasks left, ``2-5%2``) and its pending split-off tasks apart (without it squeue
    folds them into the meta's line, with ``--array`` it unfolds the meta record)."""
    return ["squeue", "--noheader", "--all", "--states=all", "--array-unique", f"--Format={FORMAT}"]


def excluded_args() -> list[str]:
    return ["squeue", "--noheader", "--all", "--states=all", "--array-unique", f"--format={EXCLUDED_FORMAT}"]


_KEYS = [k for _, k in FIELDS]
_NULL = ("(null)", "N/A")
# Keys whose "N/A" / "(null)" / "NONE" / "Unknown" mean unset, as openapi's "" or 0.
_INTS = ("priority", "restart_cnt", "node_count", "tasks")
_TIMES = ("submit_time", "eligible_time", "start_time", "end_time")
_TEXT_UNSET = (
    "nodes",
    "required_nodes",
    "account",
    "tres_per_job",
    "tres_per_node",
    "tres_per_task",
    "tres_per_socket",
    "features",
    "dependency",
    "admin_comment",
    "comment",
    "command",
)
_THROTTLE = re.compile(r"%(\d+)$")
# squeue prints a job's state description, when slurmctld wrote one, in place of its
# reason code (openapi's ``state_reason``, which the controller compares). Measured
# pairs (tests/fixtures/slurm/capture_fields.sh); any other description is looked up
# in ``squeue --json`` once (``reason_code`` None), then kept while it stays.
_DESCRIBED = {"job requeued in held state": "JobHeldUser"}
_PREFIXED = re.compile(r"(ReqNodeNotAvail), ")
_CODE = re.compile(r"[A-Za-z0-9_]+")


@lru_cache(maxsize=1024)  # a few distinct reasons among thousands of jobs
def reason_code(printed: str) -> str | None:
    """The reason code behind what squeue printed; None when only squeue --json tells it."""
    if _CODE.fullmatch(printed):
        return printed
    if printed in _DESCRIBED:
        return _DESCRIBED[printed]
    m = _PREFIXED.match(printed)
    return m.group(1) if m else None


def _int(v: str) -> int:
    return int(v) if v.isdigit() else 0


@dataclass(frozen=True, slots=True)
class Record:
    """One job as the poll printed it, split into its fields."""

    job_id: int
    values: tuple[str, ...]

    @property
    def state(self) -> str:
        return self.values[_STATE].upper()

    @property
    def array_job_id(self) -> int | None:
        """The array's id for a task or meta record; None for a job of no array."""
        if self.values[_TASK] in _NULL or not self.values[_TASK]:
            return None
        return _int(self.values[_ARRAY]) or None

    @property
    def task_string(self) -> str:
        """A meta record's task set (``0-19%4``); "" for a split task or a plain job."""
        t = self.values[_TASK]
        return "" if t in _NULL or t.isdigit() else t

    @property
    def reason(self) -> str:
        return self.values[_REASON]

    @property
    def holds_gpus(self) -> bool:
        """Whether it holds its GPUs now: openapi's ``gres_detail`` names them until the
        job has ended (a finished job shows none, though it ran)."""
        return self.state in ("RUNNING", "SUSPENDED", "COMPLETING")

    @property
    def run_key(self) -> tuple[str, str, str]:
        """Which run of the job this is (submit time, restart count, start time): a new
        run (a requeue, a job id reused on a reset cluster) may hold other GPUs."""
        return (self.values[_SUBMIT], self.values[_RESTARTS], self.values[_START])


_STATE, _TASK, _NODES = _KEYS.index("job_state"), _KEYS.index("array_task_id"), _KEYS.index("nodes")
_ARRAY = _KEYS.index("array_job_id")
_SUBMIT, _RESTARTS, _START = _KEYS.index("submit_time"), _KEYS.index("restart_cnt"), _KEYS.index("start_time")
_REASON = _KEYS.index("state_reason")


def split_records(text: str) -> tuple[list[Record], list[int]]:
    """The poll's records, and the ids of those that could not be split into their
    fields (a value holding SEP or END: read them with scontrol instead)."""
    out: list[Record] = []
    bad: list[int] = []
    n = len(FIELDS)
    for chunk in text.split(END):
        chunk = chunk.lstrip("\n")
        if not chunk:
            continue
        values = chunk.split(SEP)
        job = values[0].strip()
        if len(values) != n:
            if job.isdigit():
                bad.append(int(job))
            continue
        if not job.isdigit():
            continue
        out.append(Record(int(job), tuple(values)))
    return out, bad


def parse_excluded(text: str) -> dict[int, str]:
    """``squeue -o %A<SEP>%x``: job id -> its excluded nodes ("" for none)."""
    out: dict[int, str] = {}
    for chunk in text.split(END):
        job, sep, exc = chunk.lstrip("\n").partition(SEP)
        if sep and job.isdigit():
            out[int(job)] = "" if exc in _NULL else exc
    return out


@lru_cache(maxsize=1024)
def throttle_of(task_string: str) -> int | None:
    """An array's running-task limit from its meta record's task string
    (``0-19%4`` -> 4, ``0-19`` -> 0); None for "" (no meta record)."""
    if not task_string:
        return None
    m = _THROTTLE.search(task_string)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True, slots=True)
class Detail:
    """What ``scontrol -d show job -o`` adds for one job: its GPUs per node (openapi's
    ``gres_detail``: one entry per node, in the job's node order; [] when it holds
    none), its array's throttle, its excluded nodes."""

    gres_detail: tuple[str, ...]
    array_max_tasks: int
    excluded_nodes: str
    array_job_id: int | None = None


# ``scontrol -d show job``: one ``Nodes=... GRES=...`` run per set of nodes alike.
_NODE_GRES = re.compile(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)")


def parse_detail(line: str) -> tuple[int, Detail]:
    """One ``scontrol -d show job -o`` line -> (job id, Detail)."""
    kv = parse_scontrol_kv(line)
    detail: list[str] = []
    for m in _NODE_GRES.finditer(line):
        detail.extend(m.group(2) for _ in expand_hostlist(m.group(1)))
    exc = kv.get("ExcNodeList", "")
    throttle = kv.get("ArrayTaskThrottle", "0")
    array = kv.get("ArrayJobId", "")
    return int(kv["JobId"]), Detail(
        tuple(detail),
        int(throttle) if throttle.isdigit() else 0,
        "" if exc in _NULL else exc,
        int(array) if array.isdigit() else None,
    )


def parse_details(text: str) -> dict[int, Detail]:
    return dict(parse_detail(ln) for ln in text.splitlines() if ln.startswith("JobId="))


def to_openapi(
    rec: Record, excluded: str, gres_detail: tuple[str, ...], throttle: int, array: int | None, reason: str
) -> dict[str, Any]:
    """The record as the openapi job ``parse.parse_job`` reads (the keys it uses)."""
    d: dict[str, Any] = dict(zip(_KEYS, rec.values, strict=True))
    for k in _INTS:
        d[k] = _int(d[k])
    for k in _TIMES:
        d[k] = _int(d[k])
    for k in _TEXT_UNSET:
        if d[k] in _NULL:
            d[k] = ""
    d["job_id"] = rec.job_id
    d["state_reason"] = reason
    d["het_job_id"] = _int(d["het_job_id"])
    d["requeue"] = d["requeue"] == "1"
    task = d["array_task_id"]
    d["array_job_id"] = array or 0
    d["array_task_id"] = int(task) if task.isdigit() else None
    d["array_task_string"] = rec.task_string
    d["array_max_tasks"] = throttle
    d["time_limit"] = _minutes(d["time_limit"])
    d["excluded_nodes"] = excluded
    d["gres_detail"] = list(gres_detail)
    return d


def _minutes(v: str) -> int | None:
    """squeue's TimeLimit (``UNLIMITED``, ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS``) in
    whole minutes, as openapi's ``time_limit`` (Slurm keeps limits in minutes)."""
    if not v or not v[0].isdigit():
        return None
    days, _, rest = v.rpartition("-")
    parts = [int(x) for x in rest.split(":") if x.isdigit()]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return (int(days) if days.isdigit() else 0) * 1440 + h * 60 + m + (1 if s else 0)


@dataclass
class PollCache:
    """What the fields poll keeps between polls: each job's parsed SlurmJob by what
    Slurm printed for it (an unchanged job is not parsed again), the GPU indices of
    each run, and each array's throttle."""

    parsed: dict[tuple[Any, ...], SlurmJob]
    runs: dict[int, tuple[tuple[str, str, str], tuple[str, ...]]]
    throttles: dict[int, int]
    # Arrays' meta records: one whose tasks all ended unsplit (cancelled while pending)
    # prints no task and no array id in squeue -O; it is still its array's record.
    metas: set[int]
    # (job, description printed) -> the reason code squeue --json showed with it.
    reasons: dict[tuple[int, str], str]

    @classmethod
    def empty(cls) -> PollCache:
        return cls({}, {}, {}, set(), {})

    def reason_of(self, r: Record) -> str:
        code = reason_code(r.reason)
        return code if code is not None else self.reasons.get((r.job_id, r.reason), r.reason)

    def array_of(self, r: Record) -> int | None:
        return r.array_job_id or (r.job_id if r.job_id in self.metas else None)


def needs_detail(records: list[Record], excluded: Mapping[int, str], cache: PollCache) -> list[Record]:
    """The records the poll cannot complete from what it keeps: a job the excluded-nodes
    call did not list (submitted between the two calls), a run whose GPU indices are
    not known yet, a split task of an array whose throttle is not known."""
    out = []
    runs, throttles = cache.runs, cache.throttles
    for r in records:
        v = r.values
        known = runs.get(r.job_id)
        if (
            r.job_id not in excluded
            or (r.holds_gpus and (known is None or known[0] != r.run_key))
            or (v[_TASK].isdigit() and _int(v[_ARRAY]) not in throttles)
        ):
            out.append(r)
    return out


def unknown_reasons(records: list[Record], cache: PollCache) -> list[Record]:
    """The records whose printed reason is a description not known yet (``reason_code``)."""
    return [r for r in records if reason_code(r.reason) is None and (r.job_id, r.reason) not in cache.reasons]


def learn_reasons(records: list[Record], payload: Mapping[str, Any], cache: PollCache) -> None:
    """Keep the codes ``squeue --json`` (``payload``) shows for ``records``' descriptions."""
    codes = {int(j["job_id"]): str(j.get("state_reason") or "") for j in payload.get("jobs") or []}
    for r in records:
        if r.job_id in codes:
            cache.reasons[(r.job_id, r.reason)] = codes[r.job_id]


def learn(records: list[Record], details: Mapping[int, Detail], cache: PollCache) -> None:
    """Keep what the details and the meta records say: runs' GPU indices, arrays' throttles."""
    for r in records:
        t = throttle_of(r.task_string)
        if t is not None and r.array_job_id is not None:
            cache.throttles[r.array_job_id] = t
            cache.metas.add(r.job_id)
    for r in records:
        d = details.get(r.job_id)
        if d is None:
            continue
        if r.holds_gpus:
            cache.runs[r.job_id] = (r.run_key, d.gres_detail)
        if d.array_job_id == r.job_id and r.array_job_id is None:
            cache.metas.add(r.job_id)
        if d.array_job_id is not None and not r.task_string:
            cache.throttles[d.array_job_id] = d.array_max_tasks


def build_jobs(
    records: list[Record], excluded: Mapping[int, str], details: Mapping[int, Detail], cache: PollCache
) -> list[SlurmJob]:
    """The SlurmJobs of one poll. A job printed exactly as before, with the same
    excluded nodes, GPUs and throttle, is the SlurmJob parsed then; the cache keeps
    this poll's jobs only."""
    parsed: dict[tuple[Any, ...], SlurmJob] = {}
    out = []
    runs, throttles, metas = cache.runs, cache.throttles, cache.metas
    for r in records:
        v, job_id = r.values, r.job_id
        exc = excluded.get(job_id)
        if exc is None:
            d = details.get(job_id)
            exc = d.excluded_nodes if d is not None else ""
        gres: tuple[str, ...] = ()
        if r.holds_gpus and (run := runs.get(job_id)) is not None and run[0] == r.run_key:
            gres = run[1]
        task = v[_TASK]
        if task.isdigit():  # a split task: its array's throttle
            throttle = throttles.get(_int(v[_ARRAY]), 0)
        elif task in _NULL or not task:  # a plain job, or a meta record with no task left
            throttle = throttles.get(job_id, 0) if job_id in metas else 0
        else:
            throttle = throttle_of(task) or 0
        # What a job's SlurmJob depends on beyond its line (its array and reason code
        # follow from the line and what the cache learned once).
        key = (v, exc, gres, throttle)
        job = cache.parsed.get(key)
        if job is None:
            job = parse_job(to_openapi(r, exc, gres, throttle, cache.array_of(r), cache.reason_of(r)))
        parsed[key] = job
        out.append(job)
    cache.parsed = parsed
    live = {r.job_id for r in records}
    cache.runs = {j: v for j, v in cache.runs.items() if j in live}
    cache.metas &= live
    cache.reasons = {k: v for k, v in cache.reasons.items() if k[0] in live}
    arrays = {cache.array_of(r) for r in records}
    cache.throttles = {a: t for a, t in cache.throttles.items() if a in arrays}
    return out
