"""Checkpoint files on disk: atomic writes, keep the last K, a loader that
refuses what it must not trust.

Layout (wrappers/protocol.py): ``<jobdir>/checkpoints/ckpt-<seq>-step<step>.pt``.
``seq`` grows by one per checkpoint, so the newest is the highest ``seq`` even
when two checkpoints share a step (a periodic one, then a preemption one).

Crash safety: a checkpoint is written to a hidden ``.tmp`` file, fsynced,
renamed into place and the folder fsynced. A kill at any moment leaves either
the old set of checkpoints or the old set plus the new one; a half-written
file only ever has a ``.tmp`` name, which the loader ignores.

Security (checkpoints are pickles: loading one runs code its writer chose):
the job directory is created 0700; the loader refuses a folder or file it
does not own or that group/others may write, and a symlink; files are read
with ``torch.load(weights_only=True)``, which only rebuilds tensors and plain
containers. ``TEIRESIAS_TRUST_CHECKPOINT=1`` allows a full unpickle of the
user's own, permission-checked files for states that need other globals.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from wrappers import protocol

FORMAT = "teiresias-ckpt/1"
_NAME = re.compile(r"^ckpt-(\d{6,})-step(\d+)\.pt$")


class CheckpointRefused(Exception):
    """A checkpoint exists but must not or cannot be loaded; ``str`` is the one-line reason."""


class CheckpointDirUnusable(Exception):
    """The job directory cannot be created or used; the job runs without checkpoints."""


@dataclass(frozen=True)
class Written:
    path: Path
    step: int
    bytes: int
    seconds: float


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) 0700 if missing; refuse one that is not ours or is open to others."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise CheckpointDirUnusable(f"cannot create {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise CheckpointDirUnusable(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise CheckpointDirUnusable(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
    if st.st_mode & 0o077:
        # Ours but open to others (e.g. made by hand): close it rather than refuse.
        os.chmod(path, 0o700)
    if not os.access(path, os.W_OK | os.X_OK):
        raise CheckpointDirUnusable(f"{path} is not writable")


class CheckpointStore:
    """The checkpoints of one job: ``<jobdir>/checkpoints``."""

    def __init__(self, jobdir: Path, keep: int = 2) -> None:
        self.jobdir = jobdir
        self.dir = jobdir / "checkpoints"
        self.keep = max(1, keep)

    def prepare(self) -> None:
        ensure_private_dir(self.jobdir)
        ensure_private_dir(self.dir)
        probe = self.dir / f".probe-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise CheckpointDirUnusable(f"cannot write in {self.dir}: {exc.strerror or exc}") from exc

    # ------------------------------------------------------------------ listing
    def list(self) -> list[tuple[int, int, Path]]:
        """(seq, step, path) of every complete checkpoint, oldest first."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            m = _NAME.match(name)
            if m:
                out.append((int(m.group(1)), int(m.group(2)), self.dir / name))
        return sorted(out)

    def latest(self) -> Path | None:
        items = self.list()
        return items[-1][2] if items else None

    # ------------------------------------------------------------------ writing
    def write(self, payload: dict[str, Any], step: int) -> Written:
        """Write ``payload`` atomically as the next checkpoint, then drop all but the last K."""
        import torch  # only ever called inside a job that imported torch

        self._remove_stale_tmp()
        existing = self.list()
        seq = existing[-1][0] + 1 if existing else 1
        final = self.dir / f"ckpt-{seq:06d}-step{step}.pt"
        tmp = self.dir / f".{final.name}.{os.getpid()}.tmp"
        t0 = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as raw:
                f: BinaryIO = _PausingWriter(raw, self.jobdir, seq) if _pause_seq() == seq else raw
                torch.save(payload, f)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        seconds = time.perf_counter() - t0
        size = final.stat().st_size
        for _, _, old in self.list()[: -self.keep]:
            old.unlink(missing_ok=True)
        return Written(final, step, size, seconds)

    def _remove_stale_tmp(self) -> None:
        """A ``.tmp`` left by a writer killed mid-write is garbage; remove our own kind."""
        try:
            for name in os.listdir(self.dir):
                if name.startswith(".ckpt-") and name.endswith(".tmp"):
                    (self.dir / name).unlink(missing_ok=True)
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ reading
    def load(self, path: Path, trust: bool = False) -> dict[str, Any]:
        """Load one checkpoint after the ownership and permission checks; raise
        CheckpointRefused with a one-line reason otherwise."""
        import torch

        check_trusted(self.jobdir, path)
        try:
            data = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
            unsafe = "weights_only" in str(exc) or "Unsupported global" in str(exc)
            if unsafe and trust:
                data = torch.load(path, map_location="cpu", weights_only=False)
            elif unsafe:
                raise CheckpointRefused(
                    f"checkpoint {path} holds objects that weights_only loading refuses "
                    f"({_first_line(exc)}); set {protocol.ENV_TRUST}=1 to load your own file anyway"
                ) from exc
            else:
                raise CheckpointRefused(f"checkpoint {path} is corrupt or unreadable ({_first_line(exc)})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CheckpointRefused(f"checkpoint {path} is not a teiresias checkpoint (format {FORMAT} expected)")
        return data

    def set_aside(self, path: Path) -> Path:
        """Rename a refused checkpoint so a fresh start does not meet it again."""
        dest = path.with_name(path.name + f".refused-{int(time.time())}")
        os.replace(path, dest)
        return dest


def check_trusted(jobdir: Path, path: Path) -> None:
    """Refuse a file (or its folders) that is not a regular file owned by us and closed to writers."""
    uid = os.getuid()
    for p in (jobdir, path.parent, path):
        try:
            st = os.lstat(p)
        except OSError as exc:
            raise CheckpointRefused(f"cannot inspect {p}: {exc.strerror or exc}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise CheckpointRefused(f"refusing checkpoint: {p} is a symlink")
        if st.st_uid != uid:
            raise CheckpointRefused(
                f"refusing foreign checkpoint: {p} belongs to uid {st.st_uid}, not to you (uid {uid})")
        if st.st_mode & 0o022:
            raise CheckpointRefused(
                f"refusing checkpoint: {p} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise CheckpointRefused(f"refusing checkpoint: {path} is not a regular file")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _pause_seq() -> int | None:
    value = os.environ.get(protocol.ENV_TEST_PAUSE, "")
    return int(value) if value.isdigit() else None


class _PausingWriter:
    """Tests only (``TEIRESIAS_TEST_PAUSE_IN_WRITE=<seq>``): after some bytes of
    checkpoint ``seq`` are on disk, announce ``<jobdir>/test-paused-<seq>``
    (holding our pid) and stop, so a test can SIGKILL us mid-write. Pauses
    once per job: the marker stays, and a rerun writes straight through."""

    def __init__(self, raw: BinaryIO, jobdir: Path, seq: int) -> None:
        self.raw = raw
        self.marker = jobdir / f"test-paused-{seq}"
        self.written = 0
        self.armed = not self.marker.exists()

    def write(self, data: Any) -> int:
        n = self.raw.write(data)
        self.written += n
        if self.armed and self.written >= 4096:
            self.armed = False
            self.raw.flush()
            os.fsync(self.raw.fileno())
            protocol.write_json_atomic(self.marker, {"pid": os.getpid()})
            print(f"teiresias: test pause in checkpoint write (pid {os.getpid()})", file=sys.stderr, flush=True)
            while True:  # until SIGKILL
                time.sleep(3600)
        return n

    def flush(self) -> None:
        self.raw.flush()
