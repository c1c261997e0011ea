"""The audit log: one JSON line per decision (time, job, action, reason, ...).

Append-only and flushed per line, so `tail -f` shows decisions as they are
made and a crash loses at most the line being written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from slurm_plugin.controller.files import FileModes, secure_file


class AuditLog:
    def __init__(self, path: Path | None, modes: FileModes = FileModes()) -> None:
        self.path = path
        self._f: TextIO | None = None
        if path is not None:
            # Job names and reasons: readable only by the controller's user or group (files.py).
            secure_file(path, modes, "audit_log")
            self._f = open(path, "a", buffering=1)

    def write(self, job: int | None, action: str, reason: str = "", **extra: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {"time": round(time.time(), 3), "job": job, "action": action, "reason": reason}
        entry.update(extra)
        if self._f is not None:
            self._f.write(json.dumps(entry, sort_keys=False) + "\n")
        return entry

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every entry of an audit log (tests and reports)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
