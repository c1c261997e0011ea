"""Pure parsers for Slurm 22.05 output: ``squeue --json``, ``sinfo --json``
(the same openapi v0.0.38 documents slurmrestd serves), ``scontrol show job
-o`` and Slurm's error messages. Tested on captured real output in
tests/fixtures/slurm/ (re-captured by tests/fixtures/slurm/capture.sh).
"""

from __future__ import annotations

import json
import re
import time
from functools import lru_cache
from typing import Any

from slurm_plugin.backends import gputypes
from slurm_plugin.backends.base import JobTarget, SlurmJob, SlurmNode
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable

# States in which a job holds or will hold nothing any more.
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})


@lru_cache(maxsize=256)
def base_state(state: str) -> str:
    """Slurm may report ``PENDING,REQUEUED`` or ``CANCELLED by 0``: keep the base state."""
    return state.replace("+", ",").split(",")[0].split(" ")[0].strip().upper()


# Slurm's phrases for "slurmctld did not answer" (CLI stderr and restd errors).
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
    "Unable to establish control machine",
    "slurm_persist_conn_open",
)
_VANISHED = ("Invalid job id specified", "Invalid job id", "Job id not found", "Unknown job")


# ---------------------------------------------------------------- hostlists
@lru_cache(maxsize=4096)  # the same few node lists recur across thousands of jobs
def expand_hostlist(spec: str) -> tuple[str, ...]:
    """``node[1-3,5],gpu07`` -> (node1, node2, node3, node5, gpu07); keeps zero padding."""
    if not spec or spec in ("(null)", "None"):
        return ()
    out: list[str] = []
    for part in _split_top_level(spec):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            lo, _, hi = rng.partition("-")
            if not hi:
                out.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo) if lo.startswith("0") else 0
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
    return tuple(out)


def _split_top_level(spec: str) -> list[str]:
    """Split on commas outside brackets and parentheses: ``node[1,3]`` and
    ``gpu:2(IDX:0,2)`` are one item each."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in spec:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


# ---------------------------------------------------------------- GPUs
@lru_cache(maxsize=4096)
def gres_count(spec: str, name: str = "gpu") -> int:
    """GPUs in one gres or TRES string: ``gres:gpu:2``, ``gpu:tesla:2(IDX:0,2)``,
    ``gres/gpu=2``, ``gpu:4,mps:100`` -> the sum over ``name`` entries.

    A count that is not a whole number >= 0 counts as 0 (job_submit.lua
    refuses such requests). TRES strings list a typed count beside the
    untyped total (``gres/gpu=2,gres/gpu:tesla=2``): the total is taken alone.
    """
    plain = typed = 0
    tres_total: int | None = None
    for item in _split_top_level(spec or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()  # (IDX:0,2), (S:0)
        tres = item.startswith("gres/")
        if item.startswith("gres:"):
            item = item[5:]
        elif tres:
            item = item[5:].replace("=", ":")
        fields = item.split(":")
        if fields[0] != name:
            continue
        n = 1 if len(fields) == 1 else int(fields[-1]) if fields[-1].isdigit() else 0  # "gpu" alone means one
        if tres and len(fields) == 2:
            tres_total = (tres_total or 0) + n
        elif tres:
            typed += n
        else:
            plain += n
    return plain + (tres_total if tres_total is not None else typed)


@lru_cache(maxsize=4096)
def gres_types(spec: str, name: str = "gpu") -> frozenset[str]:
    """The types of the ``name`` entries of a gres or TRES string: ``gpu:a100:2``,
    ``gres:gpu:v100:1(S:0)``, ``gres/gpu:a100=2`` -> {"a100"}; untyped entries add none."""
    out: set[str] = set()
    for item in _split_top_level(spec or ""):
        item = re.sub(r"\(.*?\)", "", item).strip()
        if item.startswith("gres:"):
            item = item[5:]
        elif item.startswith("gres/"):
            item = item[5:].replace("=", ":")
        fields = item.split(":")
        if fields[0] == name and len(fields) == 3 and fields[1] and not fields[1].isdigit():
            out.add(fields[1])
    return frozenset(out)


def job_gpu_type(*specs: str) -> str:
    """The GPU type a job asked for in its tres_per_* strings ("" untyped)."""
    for spec in specs:
        types = gres_types(spec)
        if types:
            return min(types)
    return ""


def job_shards(d: dict[str, Any]) -> int:
    """GPU shards per node of one openapi job (``--gres=shard:N``), 0 for a gpu job.

    Slurm 22.05 takes all of a job's shards on a node from one GPU, so a shard
    job holds a share of exactly one GPU per node (docs/sjf-bsbf.md §9).
    """
    typed = gputypes.typed_shards(d.get("tres_per_node") or "")
    detail = [n for x in d.get("gres_detail") or [] if (n := gres_count(x, "shard"))]
    if detail:
        # A job holding one shard of each of several GPUs (typed, a Gandiva floater) holds
        # that count per GPU: the per-node sum over-counts it.
        return max(detail) // max(len(typed), 1)
    per_node = gres_count(d.get("tres_per_node") or "", "shard")
    if per_node:
        return per_node // max(len(typed), 1)
    per_job = gres_count(d.get("tres_per_job") or "", "shard")
    if per_job:
        return -(-per_job // int(d.get("node_count") or 1))
    # Held by etc/job_submit.lua with its untyped request kept aside (backends/gputypes.py).
    return gputypes.stashed_shards(str(d.get("admin_comment") or ""))


def job_gpus(d: dict[str, Any]) -> tuple[int, int | None]:
    """(total GPUs, GPUs per node if asked per node) of one openapi job.

    A running job's ``gres_detail`` (one entry per node) is what it really
    holds; otherwise the request: per job, per node x nodes, per task x tasks.
    A shard job (``--gres=shard:N``) counts as one GPU per node: the GPU whose
    shards it holds, which it may share with one other shard job. Counting it
    as 0 would leave it unmanaged; counting N would count one GPU N times.
    """
    node_count = int(d.get("node_count") or 1)
    if job_shards(d) and not gres_count(d.get("tres_per_node") or "") and not gres_count(d.get("tres_per_job") or ""):
        # A shard job is one GPU per node (a floater, holding a shard of several GPUs of its
        # node, too: it runs on one of them at a time).
        detail = [x for x in d.get("gres_detail") or [] if gres_count(x, "shard")]
        return (len(detail) if detail else node_count), 1
    per_node_req = gres_count(d.get("tres_per_node") or "")
    detail = d.get("gres_detail") or []
    if detail:
        return sum(gres_count(x) for x in detail), per_node_req or None
    if per_job := gres_count(d.get("tres_per_job") or ""):
        return per_job, None
    if per_node_req:
        return per_node_req * node_count, per_node_req
    if per_task := gres_count(d.get("tres_per_task") or ""):
        return per_task * int(d.get("tasks") or 1), None
    if per_socket := gres_count(d.get("tres_per_socket") or ""):
        return per_socket * node_count, None
    return 0, None


# ---------------------------------------------------------------- jobs
def _time(v: Any) -> float | None:
    try:
        t = float(v)
    except (TypeError, ValueError):
        return None
    return t if t > 0 else None


def parse_job(d: dict[str, Any]) -> SlurmJob:
    """One job of an openapi v0.0.38 ``jobs`` list.

    Slurm fills ``start_time``/``end_time`` of pending and running jobs with
    *expected* times; only real ones are kept: start for jobs that ran
    (RUNNING, or finished with nodes), end for finished jobs.
    """
    state = str(d.get("job_state") or "UNKNOWN").upper()
    reason = str(d.get("state_reason") or "None")
    priority = int(d.get("priority") or 0)
    gpus, gpn = job_gpus(d)
    ran_on = expand_hostlist(str(d.get("nodes") or ""))
    required = expand_hostlist(str(d.get("required_nodes") or ""))
    finished = state in FINISHED_STATES
    started = state in ("RUNNING", "SUSPENDED", "COMPLETING") or (finished and bool(ran_on))
    limit = d.get("time_limit")
    return SlurmJob(
        job_id=int(d["job_id"]),
        name=str(d.get("name") or ""),
        user=str(d.get("user_name") or d.get("user_id") or ""),
        account=str(d.get("account") or ""),
        partition=str(d.get("partition") or ""),
        state=state,
        state_reason=reason,
        priority=priority,
        restart_count=int(d.get("restart_cnt") or 0),
        requeue=bool(d.get("requeue")),
        held=state == "PENDING" and (reason in HELD_REASONS or priority == 0),
        gpus=gpus,
        num_nodes=int(d.get("node_count") or 1),
        nodes=ran_on if ran_on else required,
        required_nodes=required,
        submit_time=_time(d.get("submit_time")) or 0.0,
        eligible_time=_time(d.get("eligible_time")),
        start_time=_time(d.get("start_time")) if started else None,
        end_time=_time(d.get("end_time")) if finished else None,
        time_limit_minutes=int(limit) if isinstance(limit, (int, float)) and limit > 0 else None,
        command=str(d.get("command") or ""),
        comment=str(d.get("comment") or ""),
        gpus_per_node=gpn,
        shards=job_shards(d),
        array_job_id=int(d.get("array_job_id") or 0) or None,
        array_task_id=_task_id(d.get("array_task_id")),
        array_tasks=str(d.get("array_task_string") or ""),
        admin_comment=str(d.get("admin_comment") or ""),
        dependency=str(d.get("dependency") or ""),
        het_job_id=int(d.get("het_job_id") or 0) or None,
        gpu_type=job_gpu_type(*(str(d.get(k) or "") for k in _TRES_PER)),
        excluded_nodes=expand_hostlist(str(d.get("excluded_nodes") or "")),
        features=str(d.get("features") or ""),
        array_max_tasks=int(d.get("array_max_tasks") or 0),
        gpu_ids=_gpu_ids(ran_on if started else (), d.get("gres_detail") or []),
        shard_gpus=gputypes.typed_shards(str(d.get("tres_per_node") or "")),
    )


_TRES_PER = ("tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket")


def _gpu_ids(nodes: tuple[str, ...], detail: list[Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(node, GPU indices) from ``gres_detail``, one entry per node in the job's node order."""
    if len(detail) != len(nodes):
        return ()
    return tuple((n, ids) for n, x in zip(nodes, detail, strict=True) if (ids := gputypes.detail_gpu_ids(str(x))))


def _task_id(v: Any) -> int | None:
    return int(v) if isinstance(v, int) or (isinstance(v, str) and v.isdigit()) else None


def array_task_ids(spec: str) -> list[int]:
    """The tasks of an array meta record: ``0-5`` / ``1,3-7:2%2`` -> [1, 3, 5, 7]
    (``%N`` is the limit on running tasks, not a task)."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        if not lo.strip().isdigit():
            continue
        last = int(hi) if hi.strip().isdigit() else int(lo)
        out.extend(range(int(lo), last + 1, int(step) if step.isdigit() and int(step) > 0 else 1))
    return out


def check_payload(payload: dict[str, Any], what: str) -> None:
    """Raise the matching SlurmError if an openapi document carries errors."""
    errors = payload.get("errors") or []
    if errors:
        e = errors[0]
        words, desc = e.get("error") or "", e.get("description") or ""
        msg = f"{words}: {desc}" if words and desc else (words or desc or json.dumps(e))
        raise error_from_message(f"{what}: {msg}")


def parse_jobs_payload(payload: dict[str, Any]) -> list[SlurmJob]:
    check_payload(payload, "jobs")
    return [parse_job(d) for d in payload.get("jobs") or []]


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """``squeue --json`` (every job, finished ones younger than MinJobAge
    included: 22.05 ignores squeue's filters with --json)."""
    return parse_jobs_payload(_loads(text, "squeue --json"))


def load_squeue_json(text: str) -> dict[str, Any]:
    """``squeue --json`` as its openapi document, unparsed (its errors raised)."""
    payload = _loads(text, "squeue --json")
    check_payload(payload, "jobs")
    return payload


# ---------------------------------------------------------------- nodes
def parse_node(d: dict[str, Any]) -> SlurmNode:
    """One node of ``sinfo --json``: state ``mixed`` + flags [DRAIN] ->
    {"MIXED", "DRAIN"}."""
    state = {str(d.get("state") or "UNKNOWN").upper()}
    state |= {str(f).upper() for f in d.get("state_flags") or []}
    return SlurmNode(
        name=str(d["name"]),
        state=frozenset(state),
        gpus=gres_count(str(d.get("gres") or "")),
        gpus_used=gres_count(str(d.get("gres_used") or "")),
        partitions=tuple(d.get("partitions") or ()),
        cpus=int(d.get("cpus") or 0),
        mem_mb=int(d.get("real_memory") or 0),
        gpu_types=gres_types(str(d.get("gres") or "")),
        features=frozenset(f for f in str(d.get("active_features") or "").split(",") if f.strip()),
        shard_gpus=gputypes.typed_shards(str(d.get("gres") or "")),
    )


def parse_nodes_payload(payload: dict[str, Any]) -> list[SlurmNode]:
    check_payload(payload, "nodes")
    return [parse_node(d) for d in payload.get("nodes") or []]


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    return parse_nodes_payload(_loads(text, "sinfo --json"))


def _loads(text: str, what: str) -> dict[str, Any]:
    try:
        payload = json.loads(text)
    except ValueError:
        raise SlurmError(f"{what} printed something that is not JSON: {text[:80]!r}") from None
    if not isinstance(payload, dict):
        raise SlurmError(f"{what} printed JSON that is not an object")
    return payload


# ---------------------------------------------------------------- scontrol show job -o
_KEY_TOKEN = re.compile(r"[A-Z][A-Za-z0-9/:_]*=")  # scontrol keys start upper-case


def parse_scontrol_kv(line: str) -> dict[str, str]:
    """``scontrol show job -o`` line -> {Key: Value}. Values may contain spaces
    (Comment, Command, WorkDir): a value runs up to the next `` Key=``.
    (Token-wise rather than one big regex: 1,000 lines parse in ~20 ms.)"""
    out: dict[str, str] = {}
    key = None
    parts: list[str] = []
    match = _KEY_TOKEN.match
    for tok in line.strip().split(" "):
        m = match(tok)
        if m:
            if key is not None:
                out[key] = " ".join(parts).strip()
            key = tok[: m.end() - 1]
            parts = [tok[m.end() :]]
        elif key is not None:
            parts.append(tok)
    if key is not None:
        out[key] = " ".join(parts).strip()
    return out


def _scontrol_time(v: str) -> float | None:
    if not v or v in ("Unknown", "None", "N/A", "(null)"):
        return None
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))  # scontrol prints local time
    except ValueError:
        return None


def _minutes(v: str) -> int | None:
    """``TimeLimit``: UNLIMITED, MM, HH:MM:SS, D-HH:MM:SS -> minutes."""
    if not v or v in ("UNLIMITED", "NOT_SET", "Partition_Limit", "N/A"):
        return None
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
    parts = [int(x) for x in v.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return days * 1440 + h * 60 + m + (1 if s else 0)


def _int(v: str | None, default: int) -> int:
    """scontrol prints N/A, (null) or nothing where a number is unset."""
    try:
        return int(v) if v else default
    except ValueError:
        return default


def parse_scontrol_job(line: str) -> SlurmJob:
    """One ``scontrol show job -o`` line as a SlurmJob (GPU count from
    TresPerJob/TresPerNode; no per-node allocation detail in this format)."""
    kv = parse_scontrol_kv(line)
    null = ("(null)", "")
    state = kv.get("JobState", "UNKNOWN").upper()
    reason = kv.get("Reason", "None")
    priority = _int(kv.get("Priority"), 0)
    num_nodes = _int((kv.get("NumNodes") or "1").split("-")[0], 1)
    per_node = gres_count(kv.get("TresPerNode", ""))
    # JOB_GRES (with -d, running jobs) is what the job holds; else its request
    gpus = (
        gres_count(kv.get("JOB_GRES", ""))
        or gres_count(kv.get("TresPerJob", ""))
        or per_node * num_nodes
        or gres_count(kv.get("TresPerTask", "")) * _int(kv.get("NumTasks"), 1)
    )
    # A shard job: one shared GPU per node, as job_gpus counts it.
    typed = gputypes.typed_shards(kv.get("TresPerNode", ""))
    shards = (
        gres_count(kv.get("TresPerNode", ""), "shard") // max(len(typed), 1)
        or -(-gres_count(kv.get("JOB_GRES", "") or kv.get("TresPerJob", ""), "shard") // num_nodes)
        or gputypes.stashed_shards(kv.get("AdminComment", ""))
    )
    if shards and not gpus:
        gpus, per_node = num_nodes, 1
    ran_on = expand_hostlist(kv.get("NodeList", ""))
    required = expand_hostlist(kv.get("ReqNodeList", "") if kv.get("ReqNodeList") not in null else "")
    finished = state in FINISHED_STATES
    started = state in ("RUNNING", "SUSPENDED", "COMPLETING") or (finished and bool(ran_on))
    user = kv.get("UserId", "")
    return SlurmJob(
        job_id=int(kv["JobId"]),
        name=kv.get("JobName", ""),
        user=user.split("(")[0],
        account="" if kv.get("Account") in null else kv.get("Account", ""),
        partition=kv.get("Partition", ""),
        state=state,
        state_reason=reason,
        priority=priority,
        restart_count=_int(kv.get("Restarts"), 0),
        requeue=kv.get("Requeue") == "1",
        held=state == "PENDING" and (reason in HELD_REASONS or priority == 0),
        gpus=gpus,
        num_nodes=num_nodes,
        nodes=ran_on if ran_on else required,
        required_nodes=required,
        submit_time=_scontrol_time(kv.get("SubmitTime", "")) or 0.0,
        eligible_time=_scontrol_time(kv.get("EligibleTime", "")),
        start_time=_scontrol_time(kv.get("StartTime", "")) if started else None,
        end_time=_scontrol_time(kv.get("EndTime", "")) if finished else None,
        time_limit_minutes=_minutes(kv.get("TimeLimit", "")),
        command="" if kv.get("Command") in null else kv.get("Command", ""),
        comment=kv.get("Comment", ""),
        gpus_per_node=per_node or None,
        shards=shards,
        array_job_id=_int(kv.get("ArrayJobId"), 0) or None,
        array_task_id=_task_id(kv.get("ArrayTaskId")),
        array_tasks=kv.get("ArrayTaskId", "") if not kv.get("ArrayTaskId", "0").isdigit() else "",
        admin_comment=kv.get("AdminComment", ""),
        dependency="" if kv.get("Dependency") in null else kv.get("Dependency", ""),
        het_job_id=_int(kv.get("HetJobId"), 0) or None,
        gpu_type=job_gpu_type(*(kv.get(k, "") for k in ("TresPerJob", "TresPerNode", "TresPerTask", "TresPerSocket"))),
        excluded_nodes=expand_hostlist(kv.get("ExcNodeList", "") if kv.get("ExcNodeList") not in null else ""),
        features="" if kv.get("Features") in null else kv.get("Features", ""),
        array_max_tasks=_int(kv.get("ArrayTaskThrottle"), 0),
        shard_gpus=typed,
        gpu_ids=_scontrol_gpu_ids(line) if started else (),
    )


# ``scontrol -d show job``: one ``Nodes=... GRES=...(IDX:...)`` run per node set.
_NODE_GRES = re.compile(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)")


def _scontrol_gpu_ids(line: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out: list[tuple[str, tuple[int, ...]]] = []
    for m in _NODE_GRES.finditer(line):
        ids = gputypes.detail_gpu_ids(m.group(2))
        if ids:
            out.extend((n, ids) for n in expand_hostlist(m.group(1)))
    return tuple(out)


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """``scontrol -d show job -o`` for every job: one line each ("No jobs in
    the system" when empty)."""
    return [parse_scontrol_job(line) for line in text.splitlines() if line.startswith("JobId=")]


# ---------------------------------------------------------------- errors
def error_from_message(message: str, job_id: JobTarget | None = None) -> SlurmError:
    """Slurm's own words -> the project's exception (message kept, one line)."""
    msg = " ".join(message.split()) or "no message"
    if any(p.lower() in msg.lower() for p in _UNREACHABLE):
        return SlurmUnreachable(f"slurmctld does not answer ({msg}); is the cluster up and SLURM_CONF right?")
    if any(p.lower() in msg.lower() for p in _VANISHED):
        return JobVanished(
            f"job {job_id}: Slurm no longer knows it ({msg})"
            if job_id is not None
            else f"Slurm no longer knows the job ({msg})"
        )
    return SlurmError(msg)
