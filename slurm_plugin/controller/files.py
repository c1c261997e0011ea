"""Modes of the controller's files: the state DB and the audit log hold every
job's name and comment, so they are never left to the umask.

Without a group: folders the controller creates 0700, files 0600 (only the
controller's user reads them). With ``file_group``: 0750 / 0640 and that group,
so its members (and ``teiresias queue`` run by them) can read them.
Folders that already exist keep their modes: they may be shared with others.
"""

from __future__ import annotations

import grp
import os
from dataclasses import dataclass
from pathlib import Path

from teiresias.errors import ConfigError


@dataclass(frozen=True)
class FileModes:
    group: str | None = None

    @property
    def dir_mode(self) -> int:
        return 0o750 if self.group else 0o700

    @property
    def file_mode(self) -> int:
        return 0o640 if self.group else 0o600

    @property
    def gid(self) -> int:
        return grp.getgrnam(self.group).gr_gid if self.group else -1


def _fail(path: Path, what: str, exc: OSError) -> ConfigError:
    why = exc.strerror or str(exc)
    return ConfigError(
        f"{path}: cannot {what} ({why}); run the controller as the user that owns it"
        " (the Slurm admin) or point the config at a writable place"
    )


def _exists(p: Path, key: str) -> bool:
    try:
        return p.exists()
    except OSError as exc:  # a folder above that this user may not search
        raise _fail(p, f"look for the folder of {key or p}", exc) from None


def ensure_dir(path: Path, modes: FileModes, key: str = "") -> None:
    """Create ``path`` and missing parents with ``modes.dir_mode`` (umask-proof)."""
    missing: list[Path] = []
    p = path
    while not _exists(p, key):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=modes.dir_mode)
        except FileExistsError:
            continue  # another process made it meanwhile
        except OSError as exc:
            raise _fail(d, f"create the folder for {key or path}", exc) from None
        try:
            os.chmod(d, modes.dir_mode)  # mkdir's mode is filtered by the umask
            if modes.group:
                os.chown(d, -1, modes.gid)
        except OSError as exc:
            raise _fail(d, "set the folder's mode", exc) from None
    if not path.is_dir():
        raise ConfigError(f"{path}: is not a folder; fix {key or 'the path'} in the config")


def secure_file(path: Path, modes: FileModes, key: str = "") -> None:
    """Create ``path`` if missing (in a folder made by :func:`ensure_dir`) and set its mode and group."""
    ensure_dir(path.parent, modes, key)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, modes.file_mode)
    except OSError as exc:
        raise _fail(path, f"open {key or 'the file'} for writing", exc) from None
    try:
        os.fchmod(fd, modes.file_mode)
        if modes.group:
            os.fchown(fd, -1, modes.gid)
    except OSError as exc:
        raise _fail(path, "set the file's mode", exc) from None
    finally:
        os.close(fd)


def chmod_if_exists(path: Path, modes: FileModes) -> None:
    """SQLite's -wal / -shm files: the same mode as the database."""
    try:
        os.chmod(path, modes.file_mode)
        if modes.group:
            os.chown(path, -1, modes.gid)
    except FileNotFoundError:
        pass
