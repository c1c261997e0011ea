"""A read-only look at the controller's state DB, for `teiresias queue` and `explain`.

Those commands run as whoever asks, in another process, while the controller
writes. They read the DB through a read-only connection, in one read transaction
(one consistent state, as the controller committed it), and only the rows they
show: ``StateStore(readonly_copy=True)`` copies the whole file into memory first
(every finished job, the journal, the archive), which costs more than the
reading as the DB grows. Rows written by an older controller lack newer columns:
they read as NULL, as the store's own migration reads old rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

from slurm_plugin.controller.state import JOB_FIELDS, JobRecord, row_to_job


class StateView:
    """``jobs`` and ``get_meta`` of a StateStore, read-only; use as a context manager
    (the read transaction ends at its exit)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = self._connect()
        try:
            have = {r[1] for r in self.db.execute("PRAGMA table_info(jobs)")}
            self._columns = ", ".join(c if c in have else "NULL" for c in JOB_FIELDS)
            self.db.execute("BEGIN")
        except sqlite3.Error:
            self.db.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return db
        except sqlite3.OperationalError:
            db.close()
            # A reader who may not write the folder (file_group) cannot create the -shm
            # file a WAL database needs while no controller has it open; with no -wal
            # file, everything is in the main file (state.StateStore._copy_from).
            if self.path.with_name(self.path.name + "-wal").exists():
                raise
            return sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, isolation_level=None)

    def __enter__(self) -> StateView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        self.db.close()

    def jobs(self, *, active_only: bool = True, also: Iterable[int] = ()) -> dict[int, JobRecord]:
        """Records by job id: the active ones (every one with ``active_only=False``),
        and those of ``also`` whatever their phase."""
        sql = f"SELECT {self._columns} FROM jobs"
        extra = sorted(set(also))
        params: list[int] = []
        if active_only:
            sql += " WHERE phase != 'FINISHED'"
            if extra:
                sql += f" OR job_id IN ({', '.join('?' * len(extra))})"
                params = extra
        return {r[0]: row_to_job(r) for r in self.db.execute(sql + " ORDER BY job_id", params)}

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        try:
            r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        except sqlite3.OperationalError:  # a DB with no meta table yet
            return default
        return default if r is None else r[0]
