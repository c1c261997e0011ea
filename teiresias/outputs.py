"""Writing the files the commands produce: checks, staging and commit in one place.

The writing twin of :mod:`teiresias.yamlconf`. Every output file of the
``teiresias`` commands (``simulate --json/--jobs-csv/--plot/--report``, its
sweeps' ``--json/--csv/--plot``, ``trace synth -o``, ``trace from-sacct -o/-S``)
goes through here, so one mistake gets one line whichever command meets it.
Decisions:

- **Checked before the long work.** :func:`check_outputs` runs before a replay
  or a conversion starts: a missing folder, a directory given as a file, a
  read-only file system, a folder or file the user may not write (an immutable
  one included), an output that is one of the command's inputs (the same file,
  whatever the path says) and two outputs naming one file are each one line,
  exit 2, and nothing has run. The folder is probed by creating and at once
  removing a temporary file in it: the only way to see a read-only mount or an
  immutable folder, and it leaves nothing behind.
- **Regular files are replaced atomically**, all of a command's outputs
  together: each is written to a temporary file beside its target and renamed
  over it only once every output was written (``os.replace`` is atomic on
  POSIX), so a failure never leaves one half-written or one new beside one old.
- **A symbolic link is followed**: the file it points to is replaced and the
  link stays a link (renaming over the link itself would cut it).
- **Anything that is not a regular file is written through**, never renamed
  over: ``--json /dev/null`` writes to the device (renaming a temporary over
  it would replace the system's /dev/null with a regular file), a FIFO gets the
  bytes. Several outputs may name one such target (``/dev/null`` twice).
- **The mode of a replaced file is kept** (a 0600 file stays 0600; its owner
  and group too where the process may set them); a new file's mode follows the
  umask, as ``open(path, "w")`` would (a temporary file alone would be 0600).
  A missing folder is an error, never created: a typo in a path must not
  leave a stray folder tree.
- **A failure while writing is one line** naming the output and the system's
  reason (a full disk, an I/O error, ``/dev/full``), exit 2; the staged
  temporaries are removed and the regular files keep their old contents.

Standard output gets the same treatment in :func:`guard_stdout` (``teiresias
simulate > /dev/full`` is one line, not a traceback).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from teiresias.errors import ConfigError


@dataclass(frozen=True)
class Output:
    """One output of a command, checked: where its bytes go and how."""

    given: str  # the path as the user wrote it (messages name it)
    flag: str  # the option that names it ("--json"; "" when unnamed)
    path: Path  # where the bytes go: a regular file's path with every link followed; else the path given
    through: bool  # not a regular file (a device, a FIFO): written in place, never renamed over
    mode: int | None  # permission bits of the regular file it replaces; None: a new file (umask)
    owner: tuple[int, int] | None  # uid, gid of the regular file it replaces

    def label(self) -> str:
        return f"{self.flag} {self.given}" if self.flag else self.given


def _umask() -> int:
    # Reading the umask means setting it; /proc avoids the brief change where it exists.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _probe_folder(given: str, folder: Path) -> None:
    """Create and remove a temporary file in ``folder``: a read-only mount, an
    immutable folder or a missing permission shows here, before the long work."""
    import tempfile  # here, as in _stage: every command imports this module, few write files

    try:
        fd, tmp = tempfile.mkstemp(prefix=".teiresias-probe-", dir=folder)
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise ConfigError(f"{given}: folder {folder} is on a read-only file system; write elsewhere") from None
        raise ConfigError(f"{given}: cannot write in folder {folder} ({_why(exc)}); write elsewhere") from None
    os.close(fd)
    os.unlink(tmp)


def check_output(given: str | Path, flag: str = "") -> Output:
    """One output checked as :func:`check_outputs` does; a one-line ConfigError if unusable."""
    text = str(given)
    try:
        st: os.stat_result | None = os.stat(text)  # through every symbolic link
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a loop of links, a component that is a file
        raise ConfigError(f"{text}: cannot write there ({_why(exc)}); write elsewhere") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{text}: is a directory; give a file name for the output")
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISSOCK(st.st_mode):
            raise ConfigError(f"{text}: is a socket; give a file, a device or a FIFO for the output")
        if not os.access(text, os.W_OK):
            raise ConfigError(f"{text}: not writable by you; write elsewhere")
        # Opened by the name given (/dev/stdout names a pipe that has no path of its own).
        return Output(text, flag, Path(text), through=True, mode=None, owner=None)
    path = Path(os.path.realpath(text))  # the file a link names (a dangling link: the file it would make)
    folder = path.parent
    if not folder.is_dir():
        shown = folder if os.path.islink(text) else Path(text).parent  # the folder as the user wrote it
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"{text}: folder {shown} {what}; create it first or write elsewhere")
    _probe_folder(text, folder)
    if st is None:
        return Output(text, flag, path, through=False, mode=None, owner=None)
    if not os.access(path, os.W_OK):
        # Rename would replace it, but its owner (or chattr +i) said it must not change.
        raise ConfigError(f"{text}: the file is read-only (or immutable); make it writable or write elsewhere")
    return Output(text, flag, path, through=False, mode=stat.S_IMODE(st.st_mode), owner=(st.st_uid, st.st_gid))


def check_folder(given: str | Path, flag: str = "") -> Path:
    """A folder a command fills with files (a sweep's ``--workdir``): an existing
    folder we may write in, or a new one whose parent exists and is writable (it
    is created later, by the command; never its parents)."""
    text = str(given)
    path = Path(os.path.realpath(text))
    label = f"{flag} {text}" if flag else text
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{label}: is not a folder; give a folder (it is created if missing)")
    folder = path if path.exists() else path.parent
    if not folder.is_dir():
        raise ConfigError(f"{label}: folder {Path(text).parent} does not exist; create it first or choose another")
    _probe_folder(label, folder)
    return path


def _identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of a regular file, None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def check_outputs(
    outputs: Iterable[tuple[str, str | Path | None]],
    inputs: Iterable[tuple[str, str | Path | None]] = (),
    stdout: Iterable[str] = (),
) -> list[Output]:
    """Every output of a command, checked before it does its work (module docstring).

    ``outputs`` and ``inputs`` are (flag, path) pairs; a None path (not given)
    is skipped, and so is ``-`` for an input (standard input) and for the output
    flags in ``stdout`` (standard output, which the command writes itself); ``-``
    for another output is refused rather than made a file named "-". Returns the
    checked outputs in order; raises a one-line ConfigError for the first problem.
    """
    to_stdout = set(stdout)
    checked: list[Output] = []
    for flag, given in outputs:
        if given is None:
            continue
        if str(given) == "-":
            if flag in to_stdout:
                continue
            which = f"only {' or '.join(sorted(to_stdout))} writes to" if to_stdout else "no option writes to"
            raise ConfigError(f"{flag} -: {which} standard output here; give a file name (./- for a file named -)")
        out = check_output(given, flag)
        for other in checked:
            same = out.path == other.path or (_identity(out.path) or 0) == (_identity(other.path) or 1)
            if not out.through and same:
                raise ConfigError(f"{out.label()}: the same file as {other.label()}; give each output its own file")
        checked.append(out)
    by_identity = {}
    for flag, given in inputs:
        if given is None or str(given) == "-":
            continue
        ident = _identity(given)
        if ident is not None:
            by_identity[ident] = f"{flag} {given}" if flag else str(given)
    for out in checked:
        ident = None if out.through else _identity(out.path)
        if ident is not None and ident in by_identity:
            raise ConfigError(
                f"{out.label()}: is the input {by_identity[ident]}; writing it would destroy the input, write elsewhere"
            )
    return checked


def _as_output(target: Output | str | Path) -> Output:
    return target if isinstance(target, Output) else check_output(target)


class StagedOutputs:
    """Several outputs committed together: all written at the end, or none.

    ``open(output)`` opens a staged temporary file to write; ``commit()`` (on
    leaving the ``with`` block normally) copies the staged bytes into the
    outputs written through, then renames every other staged file onto its
    target; leaving on an exception (or ``discard()``) removes them. Any OSError
    while writing or committing becomes a one-line ConfigError naming the output.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Output]] = []

    def _stage(self, out: Output) -> Path:
        import tempfile  # here: `teiresias queue` imports this module and writes no file

        try:
            if out.through:
                # Staged away from the target (no temporary in /dev); copied into it at commit.
                fd, tmp = tempfile.mkstemp(prefix="teiresias-out-", suffix=".tmp")
            else:
                fd, tmp = tempfile.mkstemp(prefix=f".{out.path.name}.", suffix=".tmp", dir=out.path.parent)
                try:
                    os.fchmod(fd, out.mode if out.mode is not None else 0o666 & ~_umask())
                    if out.owner is not None and out.owner != (os.geteuid(), os.getegid()):
                        with contextlib.suppress(PermissionError):  # only root may give a file away
                            os.fchown(fd, *out.owner)
                except OSError:
                    os.close(fd)
                    os.unlink(tmp)
                    raise
        except OSError as exc:
            raise self._failed(out, exc) from None
        os.close(fd)
        self._staged.append((Path(tmp), out))
        return Path(tmp)

    @staticmethod
    def _failed(out: Output, exc: OSError) -> ConfigError:
        return ConfigError(f"{out.label()}: cannot write ({_why(exc)}); no output was changed")

    @contextlib.contextmanager
    def open(self, target: Output | str | Path, mode: str = "w") -> Iterator[IO[Any]]:
        """A staged file for ``target`` ("w": UTF-8 text with newlines as written, "wb": bytes)."""
        out = _as_output(target)
        tmp = self._stage(out)
        try:
            fh: IO[Any] = open(tmp, "wb") if "b" in mode else open(tmp, "w", newline="", encoding="utf-8")
            with fh:
                yield fh
        except OSError as exc:
            raise self._failed(out, exc) from None

    def commit(self) -> None:
        staged, self._staged = self._staged, []
        try:
            for tmp, out in staged:
                if out.through:
                    self._write_through(tmp, out)
            for tmp, out in staged:
                if not out.through:
                    try:
                        os.replace(tmp, out.path)
                    except OSError as exc:  # after the probe passed: the file system changed since
                        raise ConfigError(f"{out.label()}: cannot write ({_why(exc)})") from None
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)

    def _write_through(self, tmp: Path, out: Output) -> None:
        try:
            # No O_CREAT: if the device or FIFO went away, write no regular file in its place.
            fd = os.open(out.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise self._failed(out, exc) from None
        try:
            import shutil

            with open(tmp, "rb") as src, os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except OSError as exc:
            raise ConfigError(f"{out.label()}: cannot write ({_why(exc)})") from None

    def discard(self) -> None:
        for tmp, _ in self._staged:
            tmp.unlink(missing_ok=True)
        self._staged.clear()

    def __enter__(self) -> StagedOutputs:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self.commit()


@contextlib.contextmanager
def atomic_writer(target: Output | str | Path, binary: bool = False) -> Iterator[IO[Any]]:
    """One output on its own: a staged file, committed on a clean exit, else removed."""
    with StagedOutputs() as staged, staged.open(target, "wb" if binary else "w") as fh:
        yield fh


# -- standard output ------------------------------------------------------------------


class StdoutError(OSError):
    """Writing the command's standard output failed (a full disk, /dev/full, an I/O error)."""


class _GuardedStdout(io.RawIOBase):
    """File descriptor 1, whose write errors are StdoutError (errno kept: click's
    broken-pipe handling still sees EPIPE). After one failure it swallows what
    follows, so the interpreter's final flush cannot print a second traceback."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self.broken = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:  # type: ignore[override]
        if self.broken:
            return len(data)
        try:
            return os.write(self._fd, data)
        except OSError as exc:
            self.broken = True
            raise StdoutError(exc.errno, exc.strerror) from None


def guard_stdout() -> _GuardedStdout | None:
    """Route ``sys.stdout`` through :class:`_GuardedStdout`; its raw stream, or None
    when stdout is not the process's file descriptor 1 (a test runner's capture)."""
    current = sys.stdout
    try:
        if current is None or current.fileno() != 1:
            return None
    except (AttributeError, OSError, ValueError):
        return None
    with contextlib.suppress(OSError, ValueError):
        current.flush()
    raw = _GuardedStdout(1)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=current.encoding,
        errors=current.errors,
        line_buffering=bool(current.line_buffering),
        write_through=bool(getattr(current, "write_through", False)),
    )
    return raw


def stdout_failure(exc: BaseException) -> str | None:
    """The one line for a failed write to standard output, None for any other error."""
    if isinstance(exc, StdoutError):
        return f"cannot write standard output ({exc.strerror})"
    return None


def flush_stdout() -> str | None:
    """Flush standard output; the one line of :func:`stdout_failure` if that fails."""
    try:
        sys.stdout.flush()
    except StdoutError as exc:
        return stdout_failure(exc)
    return None
