"""The job-files contract: what a job launched by ``tsbatch`` and the parts
that look after it (the controller in slurm_plugin/, the in-job hooks in
wrappers/, the communication profiler in profiler/) agree on.

It is the lowest floor of the project: it imports nothing of teiresias, so
every package may import it and none has to import another sideways to learn
where a job's files are (docs/architecture.md). wrappers/protocol.py
re-exports it under its old name for job-side code written against it.

Where a job's files live
    ``tsbatch`` chooses a *job base directory* (``--checkpoint-dir``, default
    ``DEFAULT_BASE``) and an *incarnation key* (``new_key()``: random, one per
    submission, kept across requeues), and records both in the Slurm job
    comment as ``teiresias:dir=<base>;key=<key>`` (plus ``;profile=0|1`` and
    other ``;name=value`` items; ``JobComment`` is the parsed form).

    The job's own directory (checkpoints; private) is
    ``<base>/<ClusterName>/<SLURM_JOB_ID>`` (``job_dir``), mode 0700, owned by
    the job's user, with the key that owns it in ``<jobdir>/key``: a folder
    left by an earlier job with the same id (a reset cluster) carries another
    key and is set aside by the batch shell before anything reads it, and a
    second cluster sharing the home has its own level (issue 20 B11).

    The *control folder* holds what the job and the controller tell each
    other (``ENV_CONTROL_DIR`` in the job; docs/admin.md "The control
    channel"). With a site spool (``spool_dir`` in teiresias.yaml) it is
    ``<spool>/<ClusterName>/<SLURM_JOB_ID>.<key>`` (``spool_folder``): made by
    the job, mode 2770, its group the controller's (inherited from the setgid
    cluster folder), so the controller reads it without root and without
    seeing the user's home; what the controller writes for the job goes to
    ``<that>.in`` (``ENV_CONTROL_IN``), owned by the controller. Without a
    spool both are the job directory itself (a controller that runs as root
    or as the jobs' user). Files in a control folder are written mode 0644:
    the folder decides who reaches them (``SHARED_FILE_MODE``).

    ``<jobdir>/checkpoints/``   checkpoints (last K kept), written by rank 0
    ``<control>/ack.json``       preemption acknowledgement (below)
    ``<control>/checkpoints.jsonl``  one line per checkpoint written: step, bytes, seconds
    ``<control>/runs.jsonl``     each run's measured iteration time (``RunRecord``), rank 0
    ``<control>/profile/``       communication profiler records (``profile_dir``; profiler/)
    ``<control>/usage.<node>.json``  the latest resource sample of the job on that node (``UsageSample``)
    ``<control in>/accumulate.json``  sub-batch + gradient accumulation for GPU sharing (``Accumulate``)
    ``<control>/slices.jsonl``   one line per time slice the job was suspended for (``SliceRecord``), rank 0

Preemption (two-phase; Tiresias §4 preempts by checkpoint and restart)
    1. The controller sends ``PREEMPT_SIGNAL`` to the whole job
       (``scancel --signal=USR1 --full``) and notes the time.
    2. The job finishes its current optimizer step, saves, writes ``ack.json``
       (an ``Ack`` with ``restart_count`` = its ``SLURM_RESTART_COUNT`` and its
       incarnation ``key``) and
       then *waits* to be requeued: it must not exit, since a job that ends is
       COMPLETED and can no longer be requeued.
    3. The controller requeues when an Ack for the current run appears, or when
       its grace time runs out, whichever is first.

    A signal that comes before the job's hooks are ready (torch not imported
    yet, e.g. right after a requeue) is not lost: the batch shell traps USR1
    from its first line, records ``preempt-requested.<restart>`` in the control
    folder and, unless a process of this run has marked
    ``started.<restart>.<pid>`` (it is about to use its training state), writes
    the Ack itself with ``saved=False``: nothing new to save, the next run
    resumes from the newest checkpoint (``path`` empty, ``step`` that
    checkpoint's step or 0). A process that starts afterwards sees the request
    and preempts itself at its first step (``mark_run_started``,
    ``preempt_requested``).

Time limits: ``tsbatch`` asks Slurm for ``TIMELIMIT_SIGNAL`` shortly before the
limit; the job saves and requeues itself (``scontrol requeue``).

Preemption cost: every checkpoint a job writes is a ``CheckpointRecord`` line in
``checkpoints.jsonl``; the controller reads them with ``read_records(jobdir)``.
The in-job side is wrappers/hooks (docs/checkpointing.md).

Iteration time (PACKLIMIT from history, Tiresias §3.3.2): rank 0 appends a
``RunRecord`` to ``runs.jsonl`` (periodically, at every checkpoint and at
exit); the last line of a run is its figure. The controller reads them with
``read_runs(jobdir)`` when the run has ended.

Resource usage (GPU truth): on each node the hooks of the node's first process
(SLURM_LOCALID 0) rewrite ``usage.<node>.json`` every few seconds with a
``UsageSample``: NVML utilization and memory of the job's own GPUs (None
without NVML), psutil CPU and RSS of the job's process tree. Written whole
(rename), not fsynced: a lost sample is replaced by the next one. The
controller reads them with ``read_usage(jobdir)``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

R = TypeVar("R")

PREEMPT_SIGNAL = "USR1"
TIMELIMIT_SIGNAL = "USR2"
COMMENT_PREFIX = "teiresias:"
DEFAULT_BASE = "~/.teiresias/jobs"  # tsbatch --checkpoint-dir default

ENV_BASE = "TEIRESIAS_JOB_BASE"  # set by tsbatch in the job's environment
ENV_ENABLE = "TEIRESIAS_CHECKPOINT"  # "1" activates the hooks
ENV_EVERY = "TEIRESIAS_CHECKPOINT_EVERY"  # periodic checkpoint every N steps (0: only on signals)
ENV_PROFILE = "TEIRESIAS_PROFILE"  # "1": profile this run's communication
ENV_KEEP = "TEIRESIAS_CHECKPOINT_KEEP"  # how many checkpoints to keep (default 2)
ENV_START_FRESH = "TEIRESIAS_START_FRESH"  # "1": refused checkpoints are set aside, training starts over
ENV_TRUST = "TEIRESIAS_TRUST_CHECKPOINT"  # "mod.Name,...": globals allowed beyond weights_only's own
ENV_GRACE = "TEIRESIAS_TIMELIMIT_GRACE"  # seconds before the time limit for TIMELIMIT_SIGNAL
ENV_TEST_PAUSE = "TEIRESIAS_TEST_PAUSE_IN_WRITE"  # tests only: pause inside the Nth write
ENV_USAGE_EVERY = "TEIRESIAS_USAGE_EVERY"  # seconds between usage samples (default 5; 0: off)
# Where tsbatch and `teiresias profile` find the controller's profile store
# (teiresias/config.py profile_store_root): named here so that reading them
# does not import the controller's configuration at tsbatch's start.
ENV_CONFIG = "TEIRESIAS_CONFIG"  # the site's config file, for every command
DEFAULT_CONFIG = "/etc/teiresias/teiresias.yaml"  # ... when $TEIRESIAS_CONFIG is unset (docs/admin.md)
ENV_PROFILE_STORE = "TEIRESIAS_PROFILE_STORE"  # overrides the config's profile store
ENV_ELASTIC = "TEIRESIAS_ELASTIC"  # "MIN-MAX" (tsbatch --elastic): GPU counts the job may run at
# Set by the batch shell at run time (wrappers/batchscript.py): the incarnation key,
# the job directory and the two control folders (module docstring).
ENV_JOB_KEY = "TEIRESIAS_JOB_KEY"
ENV_JOB_DIR = "TEIRESIAS_JOB_DIR"
ENV_CONTROL_DIR = "TEIRESIAS_CONTROL_DIR"  # job -> controller
ENV_CONTROL_IN = "TEIRESIAS_CONTROL_IN"  # controller -> job

CHECKPOINT_RECORDS = "checkpoints.jsonl"
RUN_RECORDS = "runs.jsonl"
PREEMPT_REQUEST = "preempt-requested.{restart}"  # written by the batch shell (wrappers/batchscript.py)
RUN_STARTED = "started.{restart}.{pid}"  # written by the hooks before a process touches its state
PROFILE_SUBDIR = "profile"  # <control>/profile/: the profiler's record files
KEY_FILE = "key"  # <jobdir>/key: the incarnation that owns the job directory
CONTROL_IN_SUFFIX = ".in"  # <spool>/<cluster>/<id>.<key>.in: the controller's folder for the job
# Files the job and the controller exchange: readable by whoever reaches the folder
# (the spool folder is 2770 + the controller's group; a job directory is 0700).
SHARED_FILE_MODE = 0o644
_KEY = re.compile(r"[0-9a-f]{8,64}")


def config_path(env: Mapping[str, str]) -> Path:
    """The site's one configuration file: ``$TEIRESIAS_CONFIG``, else ``DEFAULT_CONFIG``."""
    return Path(env.get(ENV_CONFIG) or DEFAULT_CONFIG)


def site_spool(env: Mapping[str, str]) -> str:
    """``spool_dir`` of the site's config (``config_path``) for tsbatch, "" when it names
    none or the file cannot be read (the job's own directory is then its control
    folder). Read without validating the rest: a submission must not pay for, or
    fail on, the controller's knobs. A relative path is the file's folder's."""
    import yaml

    path = config_path(env)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""
    value = data.get("spool_dir") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        return ""
    return str(path.resolve().parent / os.path.expanduser(value))


def new_key() -> str:
    """A fresh incarnation key (tsbatch, one per submission)."""
    import secrets  # here: every command imports this module, few make keys (hmac, hashlib: ~5 ms)

    return secrets.token_hex(8)


def valid_key(key: str) -> bool:
    """Lower-case hex, 8-64 digits: a key from a comment is part of a path, so nothing else passes."""
    return bool(_KEY.fullmatch(key))


@dataclass(frozen=True)
class Ack:
    """A checkpoint written in answer to a preemption signal."""

    job_id: int
    restart_count: int
    step: int
    path: str
    bytes: int
    seconds: float
    time: float
    # False: nothing was saved, the next run resumes from the newest checkpoint
    # (``step`` its step, or 0; ``path`` empty). Written by the batch shell for a run
    # that had not started training, or by the hooks when the checkpoint could not
    # be written (a full disk, a file-size limit, a read-only folder).
    saved: bool = True
    # The job's incarnation key ("" from writers that predate it): an Ack of an
    # earlier job with the same id is never taken for this one's.
    key: str = ""


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint written by a job (a line of ``checkpoints.jsonl``).

    ``seconds`` and ``bytes`` are what a preemption costs this job (the save
    side); ``reason`` is preempt, timelimit, term, periodic or api.
    """

    job_id: int
    restart_count: int
    step: int
    path: str
    bytes: int
    seconds: float
    time: float
    reason: str


def parse_comment(comment: str) -> dict[str, str]:
    """``teiresias:dir=/x;profile=1`` -> {"dir": "/x", "profile": "1"}; {} if not ours."""
    if not comment or not comment.startswith(COMMENT_PREFIX):
        return {}
    out: dict[str, str] = {}
    for item in comment[len(COMMENT_PREFIX) :].split(";"):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def format_comment(items: dict[str, str]) -> str:
    """The inverse of ``parse_comment`` (tsbatch writes it into ``--comment``)."""
    return COMMENT_PREFIX + ";".join(f"{k}={v}" for k, v in items.items())


@dataclass(frozen=True)
class JobComment:
    """The teiresias items of a Slurm job comment, typed (``tsbatch`` writes them).

    ``dir`` is the job base directory ("" when the job was not submitted by
    tsbatch: no job files to read); ``profile`` whether its first run is
    profiled; ``app`` the Themis app (``tsbatch --app``, Themis §3.1);
    ``iterations`` the total optimizer steps it declared (0: not declared);
    ``key`` its incarnation key ("" when absent or not a valid key: such a job
    has no spool folder); ``items`` every item, also those this class does not name.
    """

    dir: str = ""
    profile: bool = False
    app: str = ""
    iterations: int = 0
    items: tuple[tuple[str, str], ...] = ()
    key: str = ""

    def job_dir(self, job_id: int | str, cluster: str = "") -> Path | None:
        """The job directory (``job_dir``), or None for a job without job files. A job
        without a key (written by hand, or by a tsbatch before keys) keeps ``<dir>/<job_id>``."""
        if not self.dir:
            return None
        return job_dir(self.dir, job_id, cluster if self.key else "")


@lru_cache(maxsize=4096)
def job_comment(comment: str) -> JobComment:
    """The comment parsed once per distinct text (the controller reads every
    job's comment every round; the result is frozen, so sharing it is safe)."""
    items = parse_comment(comment)
    iters = items.get("iters", "")
    key = items.get("key", "")
    return JobComment(
        dir=items.get("dir", ""),
        profile=items.get("profile") == "1",
        app=items.get("app", ""),
        iterations=int(iters) if iters.isdigit() else 0,
        items=tuple(items.items()),
        key=key if valid_key(key) else "",
    )


def job_dir(base: str | os.PathLike[str], job_id: int | str, cluster: str = "") -> Path:
    """``<base>/<cluster>/<job_id>``; ``<base>/<job_id>`` without a cluster (outside Slurm, old jobs)."""
    root = Path(os.path.expanduser(str(base)))
    return (root / cluster if cluster else root) / str(job_id)


def spool_folder(spool: str | os.PathLike[str], cluster: str, job_id: int | str, key: str) -> Path:
    """A job's control folder in the site spool: ``<spool>/<cluster>/<job_id>.<key>``."""
    return Path(spool) / cluster / f"{job_id}.{key}"


def spool_in_folder(spool: str | os.PathLike[str], cluster: str, job_id: int | str, key: str) -> Path:
    """What the controller writes for the job: ``<spool>/<cluster>/<job_id>.<key>.in``."""
    return Path(spool) / cluster / f"{job_id}.{key}{CONTROL_IN_SUFFIX}"


def controller_folder(path: Path) -> bool:
    """A ``.in`` folder is trusted when the owner of the cluster folder above it
    (the controller's user, who made the spool) owns it too."""
    try:
        owner = os.lstat(path.parent).st_uid
    except OSError:
        return False
    return owned_folder(path, owner)


def owned_folder(path: Path, uid: int) -> bool:
    """``path`` is a real folder (not a link) owned by ``uid``: the test both sides
    make before trusting a spool folder (anyone may create a name in the spool)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


def profile_dir(jobdir: str | os.PathLike[str]) -> Path:
    """Where the profiler writes a job's record files: ``<jobdir>/profile``."""
    return Path(jobdir) / PROFILE_SUBDIR


def ack_path(jobdir: Path) -> Path:
    return jobdir / "ack.json"


def replace_json(path: Path, payload: object, fsync: bool) -> None:
    """Temporary file in the same (existing) folder, then rename: readers never
    see half a file. ``fsync`` first when the file must survive a crash. Mode
    ``SHARED_FILE_MODE`` whatever the umask: the reader may be the other side."""
    import tempfile  # here: every command imports this module, few write files (shutil, random)

    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, SHARED_FILE_MODE)
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: object) -> None:
    """Its folder made if missing, then written whole, fsynced, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_json(path, payload, fsync=True)


def write_ack(jobdir: Path, ack: Ack) -> None:
    write_json_atomic(ack_path(jobdir), asdict(ack))


def read_ack(jobdir: Path) -> Ack | None:
    """The last Ack, or None when there is none or it cannot be read."""
    try:
        data = json.loads(ack_path(jobdir).read_text())
        return Ack(**data)
    except (OSError, ValueError, TypeError):
        return None


def mark_run_started(jobdir: Path, restart: int, pid: int) -> None:
    """The hooks' side of an early preemption (module docstring): this process
    is about to use its training state; markers of earlier runs are removed."""
    mine = RUN_STARTED.format(restart=restart, pid=pid)
    for old in jobdir.glob("started.*"):
        if old.name.split(".")[1] != str(restart):
            old.unlink(missing_ok=True)
    for old in jobdir.glob("preempt-requested.*"):
        if old.name.split(".", 1)[1] != str(restart):
            old.unlink(missing_ok=True)
    fd = os.open(jobdir / mine, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)


def preempt_requested(jobdir: Path, restart: int) -> bool:
    """True when the batch shell recorded a preemption signal for this run."""
    return (jobdir / PREEMPT_REQUEST.format(restart=restart)).exists()


def records_path(jobdir: Path) -> Path:
    return jobdir / CHECKPOINT_RECORDS


def _append_line(path: Path, record: Any, fsync: bool) -> None:
    """One JSON line per record, appended; ``fsync`` when a lost line would cost more than a delay.
    Mode ``SHARED_FILE_MODE`` (the controller reads them), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, SHARED_FILE_MODE)
    if os.fstat(fd).st_mode & 0o777 != SHARED_FILE_MODE:
        os.fchmod(fd, SHARED_FILE_MODE)
    with os.fdopen(fd, "a") as f:
        f.write(json.dumps(asdict(record)) + "\n")
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def _read_lines(path: Path, make: Callable[..., R]) -> list[R]:
    """Every whole line as ``make(**line)``, oldest first; [] when the file cannot be read.
    A line torn by a kill during an append (or of another shape) is skipped."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out: list[R] = []
    for line in lines:
        try:
            out.append(make(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def append_record(jobdir: Path, record: CheckpointRecord) -> None:
    """Append one line and fsync: a reader sees whole lines (a torn last line is skipped)."""
    _append_line(records_path(jobdir), record, fsync=True)


def read_records(jobdir: Path) -> list[CheckpointRecord]:
    """Every checkpoint this job wrote, oldest first; [] when none. The controller
    reads this to learn a job's preemption cost (duration and size of a save)."""
    return _read_lines(records_path(jobdir), CheckpointRecord)


@dataclass(frozen=True)
class RunRecord:
    """One run's measured iteration time (a line of ``runs.jsonl``).

    ``median_step_s`` is the median wall time between consecutive optimizer
    steps after the first few (warm-up) steps of the run; ``steps`` counts the
    intervals it is the median of; ``nodes`` is the run's node count as Slurm
    told the job (SLURM_JOB_NUM_NODES, 0 when unknown).
    """

    job_id: int
    restart_count: int
    steps: int
    median_step_s: float
    nodes: int
    time: float
    # Mean percent of those steps' wall time spent outside the DataLoader (computing rather
    # than waiting for input; wrappers/hooks/steptime.py). None: not measured (older hooks).
    busy: float | None = None


def runs_path(jobdir: Path) -> Path:
    return jobdir / RUN_RECORDS


def append_run(jobdir: Path, record: RunRecord) -> None:
    """Append one line (no fsync: a lost last line only delays what it reports)."""
    _append_line(runs_path(jobdir), record, fsync=False)


def read_runs(jobdir: Path) -> dict[int, RunRecord]:
    """The latest record of each run, by restart count; {} when none. Torn lines are skipped."""
    out: dict[int, RunRecord] = {}
    for r in _read_lines(runs_path(jobdir), RunRecord):
        if r.steps > 0 and r.median_step_s > 0:
            out[r.restart_count] = r  # later lines of a run cover more steps
    return out


@dataclass(frozen=True)
class UsageSample:
    """What one node of a job used at ``time`` (a ``usage.<node>.json`` file).

    GPU fields cover the job's own GPUs on that node (CUDA_VISIBLE_DEVICES):
    ``gpu_util`` the mean NVML utilization in percent, ``gpu_mem_used`` /
    ``gpu_mem_total`` bytes summed over them. All three are None when NVML
    cannot be used (no driver, no GPU: the normal case off a GPU node);
    ``gpu_note`` then says why. ``cpu_percent`` (100 = one core) and
    ``rss_bytes`` cover the job's processes on the node.
    """

    job_id: int
    restart_count: int
    node: str
    time: float
    gpus: int
    gpu_util: float | None
    gpu_mem_used: int | None
    gpu_mem_total: int | None
    cpu_percent: float
    rss_bytes: int
    processes: int
    gpu_note: str = ""


USAGE_GLOB = "usage.*.json"


def usage_path(jobdir: Path, node: str) -> Path:
    return jobdir / f"usage.{node}.json"


def write_usage(jobdir: Path, sample: UsageSample) -> None:
    """Whole file or nothing (rename), without fsync: samples are cheap and replaced."""
    replace_json(usage_path(jobdir, sample.node), asdict(sample), fsync=False)


def read_usage(jobdir: Path) -> list[UsageSample]:
    """The latest sample of every node of the job; [] when none (or unreadable)."""
    out: list[UsageSample] = []
    try:
        paths = sorted(jobdir.glob(USAGE_GLOB))
    except OSError:
        return []
    for path in paths:
        try:
            out.append(UsageSample(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out


# GPU sharing (SJF-BSBF, docs/sjf-bsbf.md): the controller writes accumulate.json
# before (re)starting a job that shares GPUs; the hooks read it once when the run
# starts (a restart boundary) and split every DataLoader batch into
# ``accumulation`` micro-batches, stepping the optimizer once per full batch.
ACCUMULATE = "accumulate.json"


@dataclass(frozen=True)
class Accumulate:
    """``accumulation``: micro-batches per DataLoader batch (1: off); ``sub_batch``:
    the per-GPU micro-batch the scheduler planned (for display; the split is by count)."""

    accumulation: int
    sub_batch: int | None = None


class AccumulateInvalid(ValueError):
    """accumulate.json exists but is not a valid ``Accumulate``."""


def write_accumulate(jobdir: Path, acc: Accumulate) -> None:
    """Whole file or nothing (rename)."""
    replace_json(jobdir / ACCUMULATE, asdict(acc), fsync=False)


def read_accumulate(jobdir: Path) -> Accumulate | None:
    """The job's accumulation setting; None without the file; AccumulateInvalid naming the problem."""
    path = jobdir / ACCUMULATE
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        # No job dir (or a file in its place, which the checkpoint hooks
        # already warn about): no setting, not a second warning.
        return None
    except (OSError, ValueError) as exc:
        raise AccumulateInvalid(f"{path}: unreadable ({exc})") from None
    if not isinstance(raw, dict) or set(raw) - {"accumulation", "sub_batch"}:
        raise AccumulateInvalid(f'{path}: expected {{"accumulation": N, "sub_batch": B}}')
    n, b = raw.get("accumulation"), raw.get("sub_batch")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise AccumulateInvalid(f"{path}: accumulation must be a whole number >= 1, got {n!r}")
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
        raise AccumulateInvalid(f"{path}: sub_batch must be a whole number >= 1, got {b!r}")
    return Accumulate(n, b)


# Time-slicing (Gandiva §3.1, docs/gandiva.md): ``scontrol suspend`` sends SIGTSTP;
# the hooks finish the mini-batch, move GPU state to the host, stop themselves and
# on SIGCONT move it back. Rank 0 appends one SliceRecord per suspension.
SLICE_RECORDS = "slices.jsonl"


@dataclass(frozen=True)
class SliceRecord:
    """One suspension of a run: ``step`` the last optimizer step before it,
    ``signalled`` when SIGTSTP came, ``parked`` when the process stopped itself
    (0.0: Slurm's SIGSTOP caught it first, mid-step), ``resumed`` when SIGCONT
    came (wall clock, time.time()); ``offloaded_bytes`` GPU bytes moved to the host."""

    job_id: int
    restart_count: int
    step: int
    signalled: float
    parked: float
    resumed: float
    offloaded_bytes: int


def append_slice(jobdir: Path, record: SliceRecord) -> None:
    """Append one line (no fsync: a lost line only hides one slice from the statistics)."""
    _append_line(jobdir / SLICE_RECORDS, record, fsync=False)


def read_slices(jobdir: Path) -> list[SliceRecord]:
    """Every suspension recorded by the job, oldest first; torn lines are skipped."""
    return _read_lines(jobdir / SLICE_RECORDS, SliceRecord)


# Server-wide time-slicing (Gandiva §4.1 Figure 9, docs/gandiva.md): a 1-GPU job bound
# to several GPUs of its node (a shard of each) runs on the one the controller names in
# ``gpu.json``; the hooks read it when the run starts, at every resume and at mini-batch
# boundaries, and append one DeviceRecord per GPU they switch to.
DEVICE = "gpu.json"
DEVICE_RECORDS = "devices.jsonl"


@dataclass(frozen=True)
class Device:
    """``gpu``: the GPU to run on, by Slurm's index on the node (as in SLURM_JOB_GPUS);
    ``since``: when the controller chose it (wall clock)."""

    gpu: int
    since: float


class DeviceInvalid(ValueError):
    """gpu.json exists but is not a valid ``Device``."""


def write_device(jobdir: Path, device: Device) -> None:
    """Whole file or nothing (rename)."""
    replace_json(jobdir / DEVICE, asdict(device), fsync=False)


def read_device(jobdir: Path) -> Device | None:
    """The GPU the controller chose; None without the file; DeviceInvalid naming the problem."""
    path = jobdir / DEVICE
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise DeviceInvalid(f"{path}: unreadable ({exc})") from None
    gpu, since = raw.get("gpu") if isinstance(raw, dict) else None, raw.get("since") if isinstance(raw, dict) else None
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0 or not isinstance(since, int | float):
        raise DeviceInvalid(f'{path}: expected {{"gpu": N, "since": T}}')
    return Device(gpu, float(since))


@dataclass(frozen=True)
class DeviceRecord:
    """The job ran on GPU ``gpu`` (Slurm's index) from ``time`` on, after optimizer step
    ``step`` of run ``restart_count``; ``local``: that GPU's CUDA index inside the job
    (its place in CUDA_VISIBLE_DEVICES), -1 where there is no CUDA device (CPU runs)."""

    job_id: int
    restart_count: int
    step: int
    gpu: int
    local: int
    time: float


def append_device(jobdir: Path, record: DeviceRecord) -> None:
    _append_line(jobdir / DEVICE_RECORDS, record, fsync=False)


def read_devices(jobdir: Path) -> list[DeviceRecord]:
    """Every GPU switch the job recorded, oldest first; torn lines are skipped."""
    return _read_lines(jobdir / DEVICE_RECORDS, DeviceRecord)


@dataclass(frozen=True)
class Elastic:
    """``tsbatch --elastic MIN-MAX``: the job may run on MIN..MAX GPUs (Gandiva §3.3
    grow-shrink). Its script's per-rank batch is the one it uses at MAX ranks; at
    w ranks the hooks accumulate MAX/w loader batches per optimizer step, so
    per-rank batch x accumulation x ranks stays the job's batch."""

    min_gpus: int
    max_gpus: int

    def accumulation(self, ranks: int) -> int:
        """Loader batches per optimizer step at ``ranks`` ranks; ValueError when MAX is not a multiple."""
        if ranks < 1 or self.max_gpus % ranks:
            raise ValueError(f"{ranks} rank(s) do not divide the elastic maximum {self.max_gpus}")
        return self.max_gpus // ranks


def parse_elastic(text: str) -> Elastic:
    """``"1-4"`` -> Elastic(1, 4); ValueError naming what is wrong."""
    lo, sep, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi if sep else lo)
    except ValueError:
        raise ValueError(f"--elastic expects MIN-MAX GPU counts such as 1-4, got {text!r}") from None
    if a < 1 or b < a:
        raise ValueError(f"--elastic expects 1 <= MIN <= MAX, got {text!r}")
    return Elastic(a, b)
