"""The controller's durable state: one SQLite file in WAL mode.

Tables
    jobs      one row per managed job: accounting (closed run time, the open
              run), queue, preemption phase, planned placement, checkpoint cost.
    segments  every run of every job (start, end, how the end was known).
    journal   one row written *before* each action on Slurm and marked done
              after it; rows still ``pending`` at start-up are actions a crash
              interrupted, which the controller finishes (idempotently) first.
    samples   finished jobs' GPU-seconds: the site's own prior for 2D-Gittins.
    runs      ended runs' measured iteration time with their placement and skew:
              the history PACKLIMIT is fitted on (controller/packlimit.py).
    meta      small key/values (round counter, last round time).

Which states persist across a crash is documented in docs/job-states.md.
"""

from __future__ import annotations

import json
import operator
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from slurm_plugin.controller.files import FileModes, chmod_if_exists, secure_file
from teiresias.domain import Allocation, Placement
from teiresias.errors import ConfigError
from teiresias.jobfiles import JobComment, job_comment


class Phase(str, Enum):
    """A managed job's phase in the controller (docs/job-states.md)."""

    PENDING = "PENDING"  # held in Slurm, waiting for the controller to start it
    STARTING = "STARTING"  # released with a node list; Slurm has not started it yet
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"  # signalled; waiting for its Ack or the grace time
    FINISHED = "FINISHED"  # ended (or vanished from Slurm); kept for reports


@dataclass(slots=True)
class JobRecord:
    job_id: int
    user: str = ""
    account: str = ""
    partition: str = ""
    name: str = ""
    comment: str = ""
    gpus: int = 0
    submit_time: float = 0.0
    phase: Phase = Phase.PENDING
    phase_since: float = 0.0
    first_start_time: float | None = None
    # Sum of completed run segments (seconds); the open run is counted live.
    closed_run_seconds: float = 0.0
    run_start: float | None = None  # start of the open run (Slurm's StartTime)
    run_restart: int | None = None  # Slurm restart count of the open run
    closed_restart: int = -1  # restart count of the last closed run
    last_running_seen: float | None = None
    restart_count: int = 0  # last restart count Slurm reported
    # Starvation promotion (Tiresias §3.2.3) resets t_J and delta_J: we keep
    # the promotion time and the executed time at that instant instead.
    promo_time: float | None = None
    promo_executed: float = 0.0
    queue: int = 0
    rank: int | None = None  # position in the policy's last order (0 = first)
    gittins: float | None = None
    preemptions: int = 0
    planned: Placement | None = None
    reason: str = ""
    skew: float | None = None
    signal_time: float | None = None
    signal_restart: int | None = None
    ckpt_seconds: float | None = None
    ckpt_bytes: int | None = None
    final_state: str | None = None
    end_time: float | None = None
    # Identity beside job_id (ids restart on a new or reset cluster): Slurm's
    # ClusterName, and the SubmitTime Slurm showed last (a requeue moves it).
    cluster: str = ""
    slurm_submit_time: float | None = None
    # The restart count that SubmitTime belongs to. A requeue counts the restart at
    # once but moves SubmitTime only when the run has finished completing (Slurm's
    # batch_requeue_fini), so a job seen COMPLETING shows the new count beside the
    # old time: the next SubmitTime is the same job's iff its count is above this one.
    # None: written before this field (reconcile.same_job falls back on restart_count).
    submit_restart: int | None = None
    # The job's own ``-w`` node list as first seen (comma-separated, "" none; None: a
    # record from before this field), and the list the controller last pinned at a
    # start: Slurm's ReqNodeList shows the pin from then on (controller/constraints.py).
    user_nodes: str | None = None
    pinned_nodes: str = ""
    # Work lost to the controller's preemptions, in GPU-seconds: GPUs x the time since
    # the run's last checkpoint (its start for a job that cannot checkpoint) at each
    # requeue; 0 for a preemption the job acknowledged with a checkpoint.
    lost_gpu_seconds: float = 0.0
    # Measured use of the current run (wrappers/hooks/usage.py, summed over its
    # nodes; controller/usage.py): mean GPU utilization %, GPU memory used and
    # total in bytes (None without NVML: no GPU there), CPU % (100 = one core),
    # RSS bytes, the sample's time, and why GPU figures are missing.
    # None / "" while the job does not run or before its first sample.
    gpu_util: float | None = None
    gpu_mem_used: int | None = None
    gpu_mem_total: int | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    usage_time: float | None = None
    usage_note: str = ""
    # GPU sharing (SJF-BSBF, docs/sjf-bsbf.md §9): the partner while both run,
    # this job's side of the pair ("host": it held the GPUs first; "guest": it
    # was started on them), and its sub-batch / accumulation steps, which it
    # keeps after the partner ends (they change only at a restart boundary).
    shared_with: int | None = None
    share_role: str = ""
    sub_batch: int | None = None
    accumulation: int = 1
    # When the current pair began and ended (both sides), and xi measured for this
    # job's run: its step rate alone over its rate while shared, from the hooks'
    # runs.jsonl (controller/sharing.py measured_xi); None until both are known.
    shared_since: float | None = None
    shared_until: float | None = None
    interference: float | None = None

    @property
    def active(self) -> bool:
        return self.phase is not Phase.FINISHED

    @property
    def files(self) -> JobComment:
        """The comment's teiresias items, typed: where the job's files are, whether it
        is profiled, its app (teiresias/jobfiles.py parses each comment text once)."""
        return job_comment(self.comment)


class JournalStatus(str, Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True)
class JournalEntry:
    id: int
    time: float
    job_id: int
    action: str
    restart_count: int
    args: dict[str, Any] = field(default_factory=dict)
    status: JournalStatus = JournalStatus.PENDING


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One ended run of a job (a row of ``runs``): where it ran and how fast it went.

    ``min_nodes`` is the fewest nodes its GPUs fit on (ceil(gpus / GPUs per
    node)); the run was consolidated when ``nodes <= min_nodes``. ``skew`` is
    the job's S_J when the run ended (None: never profiled)."""

    job_id: int
    restart_count: int
    model: str
    gpus: int
    nodes: int
    min_nodes: int
    skew: float | None
    median_step_s: float
    steps: int
    time: float

    @property
    def consolidated(self) -> bool:
        return self.nodes <= self.min_nodes


_RUN_FIELDS = [f.name for f in fields(RunOutcome)]
_JOB_FIELDS = [f.name for f in fields(JobRecord)]
JOB_FIELDS = tuple(_JOB_FIELDS)  # the jobs table's columns, in JobRecord's order
_GET_FIELDS = operator.attrgetter(*_JOB_FIELDS)
_LRS = _JOB_FIELDS.index("last_running_seen")
_PHASE = _JOB_FIELDS.index("phase")
_PLANNED = _JOB_FIELDS.index("planned")
_REAL = {
    "lost_gpu_seconds",
    "slurm_submit_time",
    "submit_time",
    "phase_since",
    "first_start_time",
    "closed_run_seconds",
    "run_start",
    "last_running_seen",
    "promo_time",
    "promo_executed",
    "gittins",
    "skew",
    "signal_time",
    "ckpt_seconds",
    "end_time",
    "gpu_util",
    "cpu_percent",
    "usage_time",
    "interference",
    "shared_since",
    "shared_until",
}
_INT = {
    "job_id",
    "gpus",
    "run_restart",
    "closed_restart",
    "restart_count",
    "submit_restart",
    "queue",
    "rank",
    "preemptions",
    "signal_restart",
    "ckpt_bytes",
    "gpu_mem_used",
    "gpu_mem_total",
    "rss_bytes",
    "shared_with",
    "sub_batch",
    "accumulation",
}


def _col_type(name: str) -> str:
    return "REAL" if name in _REAL else "INTEGER" if name in _INT else "TEXT"


_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS jobs ("
    + ", ".join(f"{n} {_col_type(n)}" + (" PRIMARY KEY" if n == "job_id" else "") for n in _JOB_FIELDS)
    + ")",
    "CREATE INDEX IF NOT EXISTS jobs_phase ON jobs(phase)",
    "CREATE TABLE IF NOT EXISTS segments (job_id INTEGER, restart_count INTEGER, start REAL,"
    " end REAL, source TEXT, PRIMARY KEY (job_id, restart_count, start))",
    "CREATE TABLE IF NOT EXISTS journal (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL,"
    " job_id INTEGER, action TEXT, restart_count INTEGER, args TEXT, status TEXT, done_time REAL)",
    "CREATE INDEX IF NOT EXISTS journal_status ON journal(status)",
    "CREATE TABLE IF NOT EXISTS samples (job_id INTEGER PRIMARY KEY, gpu_seconds REAL, time REAL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    # Added later: IF NOT EXISTS gives older state files the table on open.
    (
        "CREATE TABLE IF NOT EXISTS runs (job_id INTEGER, restart_count INTEGER, model TEXT, gpus INTEGER,"
        " nodes INTEGER, min_nodes INTEGER, skew REAL, median_step_s REAL, steps INTEGER, time REAL,"
        " PRIMARY KEY (job_id, restart_count))"
    ),
    "CREATE INDEX IF NOT EXISTS runs_time ON runs(time)",
    # Records of an earlier job with the same id (a new or reset cluster), kept whole:
    # never overwritten by the new job's record (store.archive_job).
    "CREATE TABLE IF NOT EXISTS jobs_archive ("
    + ", ".join(f"{n} {_col_type(n)}" for n in _JOB_FIELDS)
    + ", archived_time REAL)",
    "CREATE TABLE IF NOT EXISTS segments_archive (job_id INTEGER, submit_time REAL, restart_count INTEGER,"
    " start REAL, end REAL, source TEXT)",
    "CREATE TABLE IF NOT EXISTS samples_archive (job_id INTEGER, gpu_seconds REAL, time REAL)",
    (
        "CREATE TABLE IF NOT EXISTS runs_archive (job_id INTEGER, restart_count INTEGER, model TEXT, gpus INTEGER,"
        " nodes INTEGER, min_nodes INTEGER, skew REAL, median_step_s REAL, steps INTEGER, time REAL)"
    ),
]


def _migrate(db: sqlite3.Connection) -> None:
    """Columns added to JobRecord since a state file was written: added on open
    (NULL in old rows, read as the field's default), so nothing is lost."""
    for table in ("jobs", "jobs_archive"):
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        for name in _JOB_FIELDS:
            if name not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {_col_type(name)}")


def _placement_to_json(p: Placement | None) -> str | None:
    # [node, gpus] as before; [node, gpus, [ids]] when the GPUs are named (typed shards).
    if p is None:
        return None
    return json.dumps([[a.node, a.gpus, list(a.gpu_ids)] if a.gpu_ids else [a.node, a.gpus] for a in p.allocations])


def _placement_from_json(s: str | None) -> Placement | None:
    if not s:
        return None
    return Placement(
        tuple(
            Allocation(str(x[0]), int(x[1]), tuple(int(i) for i in x[2]) if len(x) > 2 else ()) for x in json.loads(s)
        )
    )


def row_to_job(row: sqlite3.Row | tuple[Any, ...]) -> JobRecord:
    """A ``jobs`` row (its columns in JOB_FIELDS order) as a JobRecord. Positional: 1,000
    rows are read by every `teiresias queue`, and keywords cost twice as much."""
    v = list(row)
    v[_PHASE] = Phase(v[_PHASE])
    v[_PLANNED] = _placement_from_json(v[_PLANNED])
    for i in _TEXT_COLUMNS:
        if v[i] is None:
            v[i] = ""
    v[_ACCUMULATION] = v[_ACCUMULATION] or 1  # NULL in rows written before sharing
    v[_LOST] = v[_LOST] or 0.0  # NULL in rows written before it
    return JobRecord(*v)


_TEXT_COLUMNS = [
    _JOB_FIELDS.index(k)
    for k in (
        "user",
        "account",
        "partition",
        "name",
        "comment",
        "reason",
        "cluster",
        "usage_note",
        "share_role",
        "pinned_nodes",
    )
]
_ACCUMULATION = _JOB_FIELDS.index("accumulation")
_LOST = _JOB_FIELDS.index("lost_gpu_seconds")


class StateStore:
    """All reads and writes of the controller's SQLite file.

    Writes go through :meth:`transaction` so a job's bookkeeping and the
    journal row that explains it land together or not at all.
    """

    def __init__(self, path: str | Path, *, readonly_copy: bool = False, modes: FileModes = FileModes()) -> None:
        self.path = Path(path)
        if readonly_copy:
            # --dry-run and `teiresias queue`: work on an in-memory copy so nothing persists.
            self.db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            if self.path.exists():
                self._copy_from(self.path)
        else:
            # Every job's name and comment is in here: never readable by all (files.py).
            secure_file(self.path, modes, "state_db")
            try:
                # One thread at a time uses a store; the demo builds it in one thread and runs it in another.
                self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=10.0, check_same_thread=False)
                self.db.execute("PRAGMA journal_mode=WAL")
                # FULL: a journal row is on disk before the action it announces is enacted.
                self.db.execute("PRAGMA synchronous=FULL")
            except sqlite3.DatabaseError as exc:
                raise ConfigError(f"{self.path}: not a usable state DB ({exc}); fix state_db in the config") from None
        for stmt in _SCHEMA:
            self.db.execute(stmt)
        _migrate(self.db)
        if not readonly_copy:
            # After the first writes: SQLite makes -wal and -shm with the creator's group,
            # which file_group's readers need to be theirs too (a reader opens both).
            for side in ("-wal", "-shm"):
                chmod_if_exists(self.path.with_name(self.path.name + side), modes)
        # Slurm's ClusterName once known (use_cluster): only its records are loaded.
        self.cluster: str | None = None
        self._depth = 0
        # What each job row holds on disk, so unchanged records are not rewritten
        # every round (10,000 jobs: the difference between ~10 ms and ~250 ms).
        self._saved: dict[int, tuple[Any, ...]] = {}

    def _copy_from(self, path: Path) -> None:
        try:
            self._backup(f"file:{path}?mode=ro")
        except sqlite3.OperationalError:
            # A reader who may not write the folder (file_group) cannot create the
            # -shm file a WAL database needs while no controller has it open. With
            # no -wal file, everything is in the main file: read it as it is.
            if path.with_name(path.name + "-wal").exists():
                raise
            self._backup(f"file:{path}?mode=ro&immutable=1")

    def _backup(self, uri: str) -> None:
        src = sqlite3.connect(uri, uri=True)
        try:
            src.backup(self.db)
        finally:
            src.close()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            self._saved.clear()  # no longer sure what is on disk: rewrite on next save
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._depth = 0

    # ------------------------------------------------------------------ jobs
    def _row_to_job(self, row: sqlite3.Row | tuple) -> JobRecord:
        return row_to_job(row)

    def jobs(self, *, active_only: bool = True) -> dict[int, JobRecord]:
        sql, params = f"SELECT {', '.join(_JOB_FIELDS)} FROM jobs WHERE 1=1", []
        if active_only:
            sql += " AND phase != 'FINISHED'"
        if self.cluster is not None:
            sql += " AND cluster = ?"
            params.append(self.cluster)
        out = {}
        for r in self.db.execute(sql + " ORDER BY job_id", params):
            rec = out[r[0]] = self._row_to_job(r)
            self._saved[r[0]] = self._fingerprint(rec)
        return out

    def job(self, job_id: int) -> JobRecord | None:
        r = self.db.execute(f"SELECT {', '.join(_JOB_FIELDS)} FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return None if r is None else self._row_to_job(r)

    @staticmethod
    def _fingerprint(rec: JobRecord) -> tuple[Any, ...]:
        # last_running_seen moves every round for every running job; it only
        # bounds the end of a run that ends unseen, so 15 s of lag on disk is
        # fine and saves rewriting every running job every round.
        v = _GET_FIELDS(rec)
        lrs = v[_LRS]
        return v if lrs is None else v[:_LRS] + (int(lrs // 15),) + v[_LRS + 1 :]

    def save_job(self, rec: JobRecord, *, force: bool = False) -> None:
        if not rec.cluster and self.cluster:
            rec.cluster = self.cluster
        fp = self._fingerprint(rec)
        if not force and self._saved.get(rec.job_id) == fp:
            return
        self._saved[rec.job_id] = fp
        values = list(_GET_FIELDS(rec))
        values[_PHASE] = rec.phase.value
        values[_PLANNED] = _placement_to_json(rec.planned)
        self.db.execute(
            f"INSERT OR REPLACE INTO jobs ({', '.join(_JOB_FIELDS)}) VALUES ({', '.join('?' * len(_JOB_FIELDS))})",
            values,
        )

    def use_cluster(self, name: str) -> list[str]:
        """From now on this store serves Slurm cluster ``name``. Rows written
        before records carried a cluster are taken as its own (they were this
        store's only cluster; their submit times are still checked job by job).
        Returns one note per other cluster whose active records are left alone."""
        with self.transaction():
            self.db.execute("UPDATE jobs SET cluster=? WHERE cluster IS NULL OR cluster=''", (name,))
        self.cluster = name
        self._saved.clear()
        return [
            f"{n} active record(s) of Slurm cluster {c!r} left alone: this is cluster {name!r}"
            for c, n in self.db.execute(
                "SELECT cluster, COUNT(*) FROM jobs WHERE cluster != ? AND"
                " phase != 'FINISHED' GROUP BY cluster ORDER BY cluster",
                (name,),
            )
        ]

    def archive_job(self, job_id: int) -> JobRecord | None:
        """Move the record stored under ``job_id`` (with its segments, sample and
        runs) to the archive tables, freeing the id for another job; pending
        journal rows of it are failed (they were about that job). Returns it."""
        old = self.job(job_id)
        if old is None:
            return None
        now = time.time()
        cols = ", ".join(_JOB_FIELDS)
        with self.transaction():
            self.db.execute(
                f"INSERT INTO jobs_archive ({cols}, archived_time) SELECT {cols}, ? FROM jobs WHERE job_id=?",
                (now, job_id),
            )
            self.db.execute(
                "INSERT INTO segments_archive SELECT job_id, ?, restart_count, start, end, source"
                " FROM segments WHERE job_id=?",
                (old.submit_time, job_id),
            )
            self.db.execute("INSERT INTO samples_archive SELECT * FROM samples WHERE job_id=?", (job_id,))
            self.db.execute(
                f"INSERT INTO runs_archive SELECT {', '.join(_RUN_FIELDS)} FROM runs WHERE job_id=?", (job_id,)
            )
            for table in ("jobs", "segments", "samples", "runs"):
                self.db.execute(f"DELETE FROM {table} WHERE job_id=?", (job_id,))
            self.db.execute(
                "UPDATE journal SET status='failed', done_time=? WHERE job_id=? AND status='pending'", (now, job_id)
            )
        self._saved.pop(job_id, None)
        return old

    def archived(self, job_id: int) -> list[JobRecord]:
        """Earlier jobs that had this id, oldest first."""
        return [
            self._row_to_job(r)
            for r in self.db.execute(
                f"SELECT {', '.join(_JOB_FIELDS)} FROM jobs_archive WHERE job_id=? ORDER BY archived_time", (job_id,)
            )
        ]

    # -------------------------------------------------------------- segments
    def add_segment(self, job_id: int, restart_count: int, start: float, end: float, source: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO segments VALUES (?, ?, ?, ?, ?)", (job_id, restart_count, start, end, source)
        )

    def segments(self, job_id: int) -> list[tuple[int, float, float, str]]:
        return list(
            self.db.execute(
                "SELECT restart_count, start, end, source FROM segments WHERE job_id=? ORDER BY start", (job_id,)
            )
        )

    # --------------------------------------------------------------- journal
    def journal_begin(self, job_id: int, action: str, restart_count: int, **args: Any) -> JournalEntry:
        now = time.time()
        cur = self.db.execute(
            "INSERT INTO journal (time, job_id, action, restart_count, args, status) VALUES (?, ?, ?, ?, ?, 'pending')",
            (now, job_id, action, restart_count, json.dumps(args)),
        )
        return JournalEntry(int(cur.lastrowid or 0), now, job_id, action, restart_count, args)

    def journal_finish(self, entry_id: int, status: JournalStatus = JournalStatus.DONE) -> None:
        self.db.execute("UPDATE journal SET status=?, done_time=? WHERE id=?", (status.value, time.time(), entry_id))

    def journal(self, status: JournalStatus | None = None, job_id: int | None = None) -> list[JournalEntry]:
        sql = "SELECT id, time, job_id, action, restart_count, args, status FROM journal WHERE 1=1"
        params: list[str | int] = []
        if status is not None:
            sql += " AND status=?"
            params.append(status.value)
        if job_id is not None:
            sql += " AND job_id=?"
            params.append(job_id)
        return [
            JournalEntry(i, t, j, a, rc, json.loads(args or "{}"), JournalStatus(s))
            for i, t, j, a, rc, args, s in self.db.execute(sql + " ORDER BY id", params)
        ]

    # --------------------------------------------------------------- samples
    def add_sample(self, job_id: int, gpu_seconds: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO samples VALUES (?, ?, ?)", (job_id, gpu_seconds, time.time()))

    def samples(self) -> list[float]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT gpu_seconds, 0, job_id FROM samples_archive UNION ALL"
                " SELECT gpu_seconds, 1, job_id FROM samples ORDER BY 2, 3"
            )
        ]

    def samples_by_job(self) -> dict[tuple[str, str], list[float]]:
        """The finished jobs' GPU-seconds per (user, job name), archived ones included: each
        job's own history (sjf-bsbf's job lengths, docs/sjf-bsbf.md §9)."""
        out: dict[tuple[str, str], list[float]] = {}
        rows = self.db.execute(
            "SELECT j.user, j.name, s.gpu_seconds FROM samples_archive s JOIN jobs_archive j ON j.job_id = s.job_id"
            " UNION ALL SELECT j.user, j.name, s.gpu_seconds FROM samples s JOIN jobs j ON j.job_id = s.job_id"
        )
        for user, name, gpu_seconds in rows:
            out.setdefault((str(user or ""), str(name or "")), []).append(float(gpu_seconds))
        return out

    def sample_count(self) -> int:
        return int(
            self.db.execute(
                "SELECT (SELECT COUNT(*) FROM samples) + (SELECT COUNT(*) FROM samples_archive)"
            ).fetchone()[0]
        )

    # ------------------------------------------------------------------ runs
    def measured_interference(self) -> dict[str, float]:
        """Model (job name, lower case) -> the latest xi measured live for it (docs/sjf-bsbf.md §9)."""
        rows = self.db.execute(
            "SELECT name, interference FROM jobs WHERE interference IS NOT NULL ORDER BY end_time, job_id"
        )
        return {str(name or "").strip().lower(): float(xi) for name, xi in rows}

    def add_run(self, run: RunOutcome) -> bool:
        """Keep a run's outcome once; False when that run is already stored."""
        cur = self.db.execute(
            f"INSERT OR IGNORE INTO runs ({', '.join(_RUN_FIELDS)}) VALUES ({', '.join('?' * len(_RUN_FIELDS))})",
            [getattr(run, f) for f in _RUN_FIELDS],
        )
        return cur.rowcount > 0

    def runs(self, latest: int | None = None) -> list[RunOutcome]:
        """Stored run outcomes, oldest first; only the ``latest`` ones when given."""
        cols = ", ".join(_RUN_FIELDS)
        sql = (
            f"SELECT {cols} FROM runs UNION ALL SELECT {cols} FROM runs_archive"
            " ORDER BY time DESC, job_id DESC, restart_count DESC"
        )
        rows = self.db.execute(
            sql + (" LIMIT ?" if latest is not None else ""), (latest,) if latest is not None else ()
        )
        return [RunOutcome(*row) for row in rows][::-1]

    def has_run(self, job_id: int, restart_count: int) -> bool:
        return (
            self.db.execute("SELECT 1 FROM runs WHERE job_id=? AND restart_count=?", (job_id, restart_count)).fetchone()
            is not None
        )

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if r is None else r[0]

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
