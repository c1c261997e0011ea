"""Checkpoint files on disk: atomic writes, keep the last K, a loader that
refuses what it must not trust.

Layout (wrappers/protocol.py): ``<jobdir>/checkpoints/ckpt-<seq>-step<step>.pt``.
``seq`` grows by one per checkpoint, so the newest is the highest ``seq`` even
when two checkpoints share a step (a periodic one, then a preemption one).

Crash safety: a checkpoint is written to a hidden ``.tmp`` file, fsynced,
renamed into place and the folder fsynced. A kill at any moment leaves either
the old set of checkpoints or the old set plus the new one; a half-written
file only ever has a ``.tmp`` name, which the loader ignores.

Integrity: torch.load(mmap=True) never reads the zip's CRC-32s, so a file
damaged after it was written loads as wrong weights. ``load`` first reads
every member of the archive and checks its CRC-32 (any burst of up to 32
flipped bits is caught, random damage with probability 1 - 2**-32), then
checks the whole structure the hooks write (``validate``): a corrupt,
truncated or hollow file raises ``CheckpointInvalid`` and the caller may fall
back to an older checkpoint. The CRC is not a defence against a forger; the
permission checks are.

Security (checkpoints are pickles: loading one runs code its writer chose):
the job directory is created 0700; the loader refuses a folder or file it
does not own or that group/others may write, and a symlink; files are read
with ``torch.load(weights_only=True)``, which only rebuilds tensors and plain
containers. Other globals are refused by name; ``TEIRESIAS_TRUST_CHECKPOINT``
lists the ones the user allows (still weights_only: never a full unpickle).
"""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from wrappers import protocol

FORMAT = "teiresias-ckpt/1"
_NAME = re.compile(r"^ckpt-(\d{6,})-step(\d+)\.pt$")


class CheckpointRefused(Exception):
    """A checkpoint exists but must not or cannot be loaded; ``str`` is the one-line reason."""


class CheckpointInvalid(CheckpointRefused):
    """Damaged rather than suspicious (corrupt, truncated, hollow, vanished):
    an older valid checkpoint may be used instead."""


class CheckpointDirUnusable(Exception):
    """The job directory cannot be created or used; the job runs without checkpoints."""


class CheckpointsReadOnly(CheckpointDirUnusable):
    """The checkpoints can be read but no new one written (a read-only file system,
    a folder without write permission): the job resumes from them, saves fail."""


class CheckpointNotWritten(Exception):
    """A checkpoint could not be written (a full disk, a file-size limit, a read-only
    folder); ``str`` is the one-line reason. The previous checkpoints are intact."""


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
        """Make the folders; raise CheckpointsReadOnly when checkpoints can only be read
        (the job resumes from them, a save fails with one line), CheckpointDirUnusable
        when there is nothing to use."""
        try:
            ensure_private_dir(self.jobdir)
            ensure_private_dir(self.dir)
            probe = self.dir / f".probe-{os.getpid()}"
            try:
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                raise CheckpointDirUnusable(f"cannot write in {self.dir}: {exc.strerror or exc}") from exc
        except CheckpointDirUnusable as exc:
            if self._readable():
                raise CheckpointsReadOnly(str(exc)) from exc
            raise

    def _readable(self) -> bool:
        """Our own folder of checkpoints, there to be read (check_trusted checks each file)."""
        try:
            st = os.lstat(self.dir)
            os.listdir(self.dir)
        except OSError:
            return False
        return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()

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
        writer: _Writer | None = None
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as raw:
                writer = _Writer(raw, self.jobdir, seq)
                # cast: torch.save writes to a file object with write() and flush() only, all
                # the writer has (its FileLike type says IO[bytes])
                _original(torch.save)(payload, cast(BinaryIO, writer))
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            # torch.save hides the writer's OSError behind its own RuntimeError ("unexpected pos")
            cause = writer.error if writer is not None and writer.error is not None else exc
            where = getattr(cause, "filename", None) or self.dir
            reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else _first_line(cause)
            raise CheckpointNotWritten(f"{reason} ({where})") from exc
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
    def load(self, path: Path, trust: str = "") -> dict[str, Any]:
        """Load one checkpoint after the ownership and permission checks, the
        integrity check and with a structure check; raise CheckpointInvalid
        (damaged) or CheckpointRefused (must not be loaded) with a one-line reason.
        ``trust``: comma-separated globals to allow beyond weights_only's own."""
        check_trusted(self.jobdir, path)
        verify_integrity(path)
        data = _load_weights_only(path, trust)
        validate(data, path)
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
        except FileNotFoundError as exc:
            # Another rank set it aside meanwhile: the same verdict as its own would be.
            raise CheckpointInvalid(f"checkpoint {p} vanished while being read") from exc
        except OSError as exc:
            raise CheckpointRefused(f"cannot inspect {p}: {exc.strerror or exc}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise CheckpointRefused(f"refusing checkpoint: {p} is a symlink")
        if st.st_uid != uid:
            raise CheckpointRefused(
                f"refusing foreign checkpoint: {p} belongs to uid {st.st_uid}, not to you (uid {uid})"
            )
        if st.st_mode & 0o022:
            raise CheckpointRefused(
                f"refusing checkpoint: {p} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
            )
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise CheckpointRefused(f"refusing checkpoint: {path} is not a regular file")


def verify_integrity(path: Path) -> None:
    """Read every member of the checkpoint's zip archive and check its CRC-32.

    torch.save writes a zip whose members carry CRC-32s, but torch.load (with
    mmap above all) never checks them; zipfile does, at the end of each member."""
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                with zf.open(info) as member:
                    while member.read(1 << 24):
                        pass
    except zipfile.BadZipFile as exc:
        reason = str(exc)
        kind = "CRC-32 mismatch" if "CRC" in reason else "truncated or not a zip archive"
        raise CheckpointInvalid(f"checkpoint {path} is corrupt ({kind}: {reason})") from exc
    except (OSError, EOFError, ValueError, OverflowError) as exc:
        raise CheckpointInvalid(f"checkpoint {path} is corrupt or unreadable ({_first_line(exc)})") from exc


# Globals outside weights_only's own that a user may sensibly allow, because
# rebuilding them runs no code of the file's choosing: numpy dtypes, scalars
# and arrays (and the functions they are pickled with), torch's optimizer and
# LR scheduler classes, builtin containers. Not "any torch or numpy class":
# numpy.memmap(path, mode="w+") would truncate a file of the file's choosing.
_NUMPY_REBUILDERS = frozenset(
    f"{pkg}.multiarray.{fn}" for pkg in ("numpy.core", "numpy._core") for fn in ("_reconstruct", "scalar")
)
_BUILTIN_CONTAINERS = frozenset(
    f"builtins.{name}" for name in ("set", "frozenset", "bytearray", "slice", "complex", "range")
)


def _resolve(name: str) -> Any:
    """The object a pickle global ``module.attr`` names (imports the module)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module for {name}")


def harmless_global(name: str) -> bool:
    """True for a global we may suggest allowing (see above). Only numpy and
    torch modules are imported to decide: importing a module the file names
    would run that module's code."""
    if name in _BUILTIN_CONTAINERS or name in _NUMPY_REBUILDERS:
        return True
    if not name.startswith(("torch.", "numpy.")):
        return False
    try:
        obj = _resolve(name)
    except (ImportError, AttributeError):
        return False
    if not isinstance(obj, type):
        return False
    if name.startswith("numpy."):
        import numpy as np

        return obj is np.ndarray or issubclass(obj, (np.dtype, np.generic))
    import torch

    return issubclass(obj, (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler))


def _load_weights_only(path: Path, trust: str) -> dict[str, Any]:
    import torch

    try:
        return _original(torch.load)(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for bad files
        first = exc
    try:
        need = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception:  # noqa: BLE001 - the pickle itself is damaged
        need = set()
    if not need:
        raise CheckpointInvalid(f"checkpoint {path} is corrupt or unreadable ({_first_line(first)})") from first
    allowed = {n.strip() for n in trust.split(",") if n.strip()}
    # The scan sees GLOBAL opcodes only; a class reached otherwise (numpy's dtype
    # instances are of numpy.dtypes.*) shows up in the next refusal: add, retry.
    for _ in range(16):
        blocked = sorted(need - allowed)
        if blocked and not all(harmless_global(g) for g in blocked):
            # e.g. posix.system: unpickling would run it. No advice to trust the file.
            raise CheckpointRefused(
                f"refusing checkpoint {path}: it names globals that weights_only loading does not allow "
                f"({', '.join(blocked)}); loading it could run code of the file's choosing, and the hooks "
                f"never write these unless your own objects are in the state: check where the file came from"
            )
        try:
            objs: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [(_resolve(g), g) for g in sorted(need)]
        except (ImportError, AttributeError) as exc:
            raise CheckpointRefused(
                f"checkpoint {path}: cannot import a global {protocol.ENV_TRUST} allows ({_first_line(exc)})"
            ) from exc
        try:
            with torch.serialization.safe_globals(objs):
                data = _original(torch.load)(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # noqa: BLE001
            m = re.search(r"but got <class '([\w.]+)'>", str(exc))
            if m is None or m.group(1) in need:
                raise CheckpointRefused(
                    f"checkpoint {path} is refused by weights_only loading even with "
                    f"{', '.join(sorted(need))} allowed ({_first_line(exc)})"
                ) from exc
            need.add(m.group(1))
            continue
        if blocked:  # loaded with harmless globals only, to name every one of them; not used
            raise CheckpointRefused(
                f"refusing checkpoint {path}: it names globals that weights_only loading does not allow "
                f"({', '.join(blocked)}); they are numpy values, torch optimizer/scheduler classes or builtin "
                f"containers, which rebuild without running code: if your optimizer "
                f"or scheduler state holds them, allow them with {protocol.ENV_TRUST}={','.join(sorted(need))}"
            )
        return data
    raise CheckpointRefused(f"checkpoint {path} needs too many globals beyond weights_only's own")


# ---------------------------------------------------------------------- structure
def validate(data: Any, path: Path) -> None:
    """Check the whole structure ``Runtime.save`` writes, so that a hollow or
    half-filled file is refused here with its first defect, not by a KeyError
    in the middle of a resume."""
    try:
        _check_checkpoint(data)
    except _Defect as d:
        raise CheckpointInvalid(f"checkpoint {path} is hollow or malformed ({d})") from None


class _Defect(Exception):
    pass


def _get(d: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(d, dict):
        raise _Defect(f"{where or 'the file'} is not a mapping")
    if key not in d:
        raise _Defect(f"{where + '.' if where else ''}{key} missing")
    value = d[key]
    if not isinstance(value, kind):
        raise _Defect(f"{where + '.' if where else ''}{key} is a {type(value).__name__}")
    return value


def _check_checkpoint(data: Any) -> None:
    import torch

    T = torch.Tensor
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _Defect(f"not a teiresias checkpoint, format {FORMAT} expected")
    if _get(data, "step", int, "") < 0:
        raise _Defect("step is negative")
    if _get(data, "world_size", int, "") < 1:
        raise _Defect("world_size < 1")
    for i, n in enumerate(_get(data, "optimizer_steps", list, "")):
        if not isinstance(n, int):
            raise _Defect(f"optimizer_steps[{i}] is a {type(n).__name__}")
    shared = _get(data, "shared", dict, "")
    for kind in ("models", "optimizers", "schedulers", "scalers"):
        for i, item in enumerate(_get(shared, kind, list, "shared")):
            where = f"shared.{kind}[{i}]"
            _get(item, "class", str, where)
            _get(item, "state", dict, where)
            if kind == "models":
                _get(item, "keys", list, where)
    _get(shared, "registered", dict, "shared")
    ranks = _get(data, "ranks", list, "")
    if not ranks:
        raise _Defect("ranks is empty")
    for r, local in enumerate(ranks):
        where = f"ranks[{r}]"
        rng = _get(local, "rng", dict, where)
        py = _get(rng, "python", dict, where + ".rng")
        _get(py, "version", int, where + ".rng.python")
        _get(py, "state", list, where + ".rng.python")
        _get(rng, "torch", T, where + ".rng")
        for i, it in enumerate(_get(local, "iterators", list, where)):
            w = f"{where}.iterators[{i}]"
            _get(it, "kind", str, w)
            for key in ("ord", "n", "pos"):
                _get(it, key, int, w)
            _get(it, "gens", list, w)
            _get(it, "rng", T, w)
            _get(it, "first_gens", list, w)
        for i, lg in enumerate(_get(local, "loader_gens", list, where)):
            _get(lg, "ord", int, f"{where}.loader_gens[{i}]")
            _get(lg, "gens", list, f"{where}.loader_gens[{i}]")
        point = _get(local, "point", dict, where)
        if _get(point, "kind", str, where + ".point") not in ("none", "iter", "next"):
            raise _Defect(f"{where}.point.kind is {point['kind']!r}")
        for key in ("ord", "n", "pos"):
            _get(point, key, int, where + ".point")


def _original(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch's own save/load: the hooks watch the script's (patches._watch_own_files), not their own."""
    return cast(Callable[..., Any], getattr(fn, "__wrapped__", fn))


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


class _Writer:
    """The file torch.save writes a checkpoint to: it keeps the first OSError (torch
    reports a failed write as "unexpected pos"), and, for tests only
    (``TEIRESIAS_TEST_PAUSE_IN_WRITE=<seq>``), after some bytes of checkpoint
    ``seq`` are on disk announces ``<jobdir>/test-paused-<seq>`` (holding our pid)
    and stops, so a test can SIGKILL us mid-write. Pauses once per job: the
    marker stays, and a rerun writes straight through."""

    def __init__(self, raw: BinaryIO, jobdir: Path, seq: int) -> None:
        self.raw = raw
        self.error: OSError | None = None
        self.marker = jobdir / f"test-paused-{seq}"
        self.written = 0
        self.armed = _pause_seq() == seq and not self.marker.exists()

    def write(self, data: Any) -> int:
        try:
            n = self.raw.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise
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
        try:
            self.raw.flush()
        except OSError as exc:
            self.error = self.error or exc
            raise
