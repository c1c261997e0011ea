"""Where the controller finds what a job tells it, and leaves what it tells a job
(docs/admin.md "The control channel"; the layout is teiresias/jobfiles.py's).

Two modes, chosen by ``spool_dir`` in teiresias.yaml:

- **spool** (production): a job's control folder is
  ``<spool>/<ClusterName>/<job id>.<key>``, made by the job itself (mode 2770,
  the controller's group through the setgid cluster folder), and the
  controller's folder for it is ``<that>.in``. The controller needs neither
  root nor the users' homes, and follows no path a user wrote: only the key
  (hex, checked) comes from the job's comment. A folder counts only when its
  owner is the job's user (anyone may create a name in the spool), so nobody
  can answer for another user's job.
- **job directory** (no ``spool_dir``): the folder is the job's own directory
  named by its comment; only a controller running as root (or as the jobs'
  user) can read it there.

The choice is process-wide (``use``): it is fixed by the configuration at the
controller's start, and every reader (preemption, history, usage, leases,
profiles, slicing, sharing) asks ``folder``/``folder_for_job`` here instead of
building paths.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from slurm_plugin.controller.state import JobRecord
from teiresias import jobfiles
from teiresias.errors import ConfigError

log = logging.getLogger("teiresias.controller")

# The cluster folder: owner (the controller) rwx, everyone may create an entry
# but not list or remove another's (sticky), entries inherit its group (setgid).
CLUSTER_FOLDER_MODE = 0o3733
IN_FOLDER_MODE = 0o755  # the controller's folder for a job: the job's user reads it by name


@dataclass(frozen=True)
class Channel:
    spool: Path | None = None  # None: each job's own directory
    cluster: str = ""  # Slurm's ClusterName, once known (a record's own wins)


_current = Channel()
_warned: set[tuple[int, str]] = set()


def use(channel: Channel) -> None:
    """Fix the process's channel (the controller's start; tests)."""
    global _current
    _current = channel
    _warned.clear()


def current() -> Channel:
    return _current


@lru_cache(maxsize=1024)
def _uid(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return int(user) if user.isdigit() else None


def _warn_once(rec: JobRecord, text: str) -> None:
    if (rec.job_id, text) not in _warned:
        _warned.add((rec.job_id, text))
        log.warning("[job %d] %s", rec.job_id, text)


def folder(rec: JobRecord) -> Path | None:
    """The folder the job writes for the controller (Ack, records, profile, usage),
    or None: not a tsbatch job, no folder yet, or one the controller must not trust."""
    ch, files = _current, rec.files
    cluster = rec.cluster or ch.cluster
    if ch.spool is None:
        return files.job_dir(rec.job_id, cluster)
    if not files.key or not cluster:
        return None
    path = jobfiles.spool_folder(ch.spool, cluster, rec.job_id, files.key)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None  # not started yet, or its node lacks the spool (the job says so in its output)
    except OSError as exc:
        _warn_once(rec, f"control folder {path} unreadable ({exc.strerror or exc})")
        return None
    uid = _uid(rec.user)
    if not stat.S_ISDIR(st.st_mode) or uid is None or st.st_uid != uid:
        _warn_once(
            rec,
            f"control folder {path} ignored: owned by uid {st.st_uid}, not by the job's user {rec.user}"
            + ("" if stat.S_ISDIR(st.st_mode) else " (not a folder)"),
        )
        return None
    return path


def folder_for_job(rec: JobRecord) -> Path | None:
    """Where the controller writes for the job (accumulate.json): the spool's
    ``.in`` folder, made here and owned by the controller; without a spool the
    job's own directory (made for its user when the controller is root). None
    when there is no such place; OSError when it cannot be made."""
    ch, files = _current, rec.files
    cluster = rec.cluster or ch.cluster
    if ch.spool is None:
        jd = files.job_dir(rec.job_id, cluster)
        if jd is None:
            return None
        uid = _uid(rec.user)
        if jd.is_symlink() or (os.geteuid() == 0 and jd.parent.is_dir() and jd.parent.stat().st_uid != uid):
            # A root controller acts only in the job's user's own folders (the path is the user's word).
            _warn_once(rec, f"{jd.parent} is not {rec.user}'s own folder; nothing is written for the job there")
            return None
        _own_job_dir(jd, files.key, rec.user)  # OSError in a private home: the spool's case
        return jd
    if not files.key or not cluster:
        return None
    path = jobfiles.spool_in_folder(ch.spool, cluster, rec.job_id, files.key)
    try:
        path.mkdir(mode=IN_FOLDER_MODE)
        os.chmod(path, IN_FOLDER_MODE)
    except FileExistsError:
        pass
    if not jobfiles.owned_folder(path, os.geteuid()):
        _warn_once(rec, f"{path} was not made by the controller; nothing is written for the job there")
        return None
    return path


def _own_job_dir(jd: Path, key: str, user: str) -> None:
    """Without a spool: the job's directory, made for its user (a root controller) with
    the job's key in it, as the batch shell makes it; a folder another incarnation left
    under this id is set aside first (the shell would set ours aside otherwise, and with
    it what we write there before the job starts)."""
    if jd.is_dir():
        if not key:
            return
        try:
            mine = (jd / jobfiles.KEY_FILE).read_text().strip() == key
        except FileNotFoundError:
            mine = False
        if mine:
            return
        jd.rename(jd.with_name(f"{jd.name}.stale.{int(time.time())}.{os.getpid()}"))
    jd.mkdir(mode=0o700, parents=True)
    uid = _uid(user) if os.geteuid() == 0 and user else None
    if key:
        (jd / jobfiles.KEY_FILE).write_text(key + "\n")
    if uid is not None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = -1
        for p in (jd, jd / jobfiles.KEY_FILE) if key else (jd,):
            os.chown(p, uid, gid)


def prepare(spool: Path, cluster: str) -> Path:
    """At the start: ``<spool>/<cluster>`` exists with CLUSTER_FOLDER_MODE and is the
    controller's (made when missing). ConfigError, naming the fix, when it cannot be."""
    if not spool.is_dir():
        try:  # the controller makes it where it may (a local cluster); a site makes it on a shared mount
            spool.mkdir(mode=0o755)
            os.chmod(spool, 0o755)
        except OSError:
            raise ConfigError(
                f"spool_dir {spool} does not exist; create it as docs/admin.md says"
                " (install -d -o <service user> -m 0755 ...), on a file system every node mounts"
            ) from None
    path = spool / cluster
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(
            f"spool_dir {spool}: cannot create {path} ({exc.strerror or exc}); "
            "make the spool the controller's user's (docs/admin.md)"
        ) from None
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise ConfigError(
            f"{path} must be a folder owned by the controller's user (uid {os.geteuid()}), "
            f"not uid {st.st_uid}; remove it or chown it"
        )
    if stat.S_IMODE(st.st_mode) != CLUSTER_FOLDER_MODE:
        try:
            os.chmod(path, CLUSTER_FOLDER_MODE)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot set mode {CLUSTER_FOLDER_MODE:o} ({exc.strerror or exc})") from None
    return path
