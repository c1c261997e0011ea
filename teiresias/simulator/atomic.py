"""Write output files so that a failure never leaves one half-written.

Each output goes to a temporary file beside its target and is renamed over
it only once everything succeeded (``os.replace`` is atomic on POSIX).

Outputs behave like a plain ``open(path, "w")`` otherwise: the file's mode
follows the umask (mkstemp alone would make it 0600 whatever the umask), and
a missing folder is an error rather than created, so a typo in a path does
not leave a stray folder tree behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from teiresias.errors import ConfigError


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


def check_output_path(path: str | Path) -> Path:
    """``path`` as a Path if an output can be written there; else a one-line ConfigError."""
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise ConfigError(f"{target}: folder {parent} {what}; create it first or write elsewhere")
    if target.is_dir():
        raise ConfigError(f"{target}: is a directory; give a file name for the output")
    return target


def _tmp_beside(path: Path, binary: bool) -> tuple[IO, Path]:
    check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    f: IO = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="", encoding="utf-8")
    return f, Path(tmp)


@contextlib.contextmanager
def atomic_writer(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """Open a temp file for writing; on clean exit rename it onto ``path``, else delete it."""
    target = Path(path)
    fh, tmp = _tmp_beside(target, binary)
    try:
        with fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class StagedOutputs:
    """Several outputs committed together: all renamed at the end, or none.

    ``stage(path)`` returns a temp path to write to; ``commit()`` renames every
    staged file onto its target; ``discard()`` (or leaving the ``with`` block
    on an exception) removes them.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def stage(self, path: str | Path) -> Path:
        target = Path(path)
        fh, tmp = _tmp_beside(target, binary=True)
        fh.close()
        self._staged.append((tmp, target))
        return tmp

    def commit(self) -> None:
        for tmp, target in self._staged:
            os.replace(tmp, target)
        self._staged.clear()

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
