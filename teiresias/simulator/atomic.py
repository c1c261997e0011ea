"""Write output files so that a failure never leaves one half-written.

Each output goes to a temporary file beside its target and is renamed over
it only once everything succeeded (``os.replace`` is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


def _tmp_beside(path: Path, binary: bool) -> tuple[IO, Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    mode = "wb" if binary else "w"
    return os.fdopen(fd, mode, **({} if binary else {"newline": "", "encoding": "utf-8"})), Path(tmp)


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

    def __enter__(self) -> "StagedOutputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self.commit()
