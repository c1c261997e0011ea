"""The audit log: one JSON line per decision (time, job, action, reason, ...).

Append-only and flushed per line, so `tail -f` shows decisions as they are
made and a crash loses at most the line being written.

Besides decisions it holds each job's timeline: one ``timeline`` line per
stage a run goes through (STAGES), each with the instant it happened
(``at``), so the seconds between submission and the end can be put down to
waiting, deciding, Slurm's start, checkpointing and requeueing
(docs/controller.md "Timeline"; :func:`timelines` reads them back).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from slurm_plugin.controller.files import FileModes, secure_file

# In the order a run goes through them; a preempted job repeats decided..requeued.
#   submitted  Slurm's submit time (stamped when the controller first sees the job)
#   decided    the time of the Slurm state the round that started it was based on
#   released   node list, release and priority set in Slurm (the start action done)
#   started    Slurm's start time of the run
#   signalled  the checkpoint signal sent
#   acked      the job's Ack written (its own clock)
#   requeued   the run requeued in Slurm (GPUs on their way back)
#   finished   Slurm's end time
STAGES = ("submitted", "decided", "released", "started", "signalled", "acked", "requeued", "finished")


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

    def stage(self, job: int, stage: str, at: float, run: int, **extra: Any) -> dict[str, Any]:
        """One timeline stage of ``job``'s run ``run`` (Slurm's restart count), at ``at``."""
        assert stage in STAGES, stage
        return self.write(job, "timeline", "", stage=stage, at=round(at, 3), run=run, **extra)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every entry of an audit log (tests and reports)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def timelines(entries: list[dict[str, Any]]) -> dict[int, list[tuple[str, float, int]]]:
    """Job -> its (stage, at, run) run by run, in STAGES order (from :func:`read_audit`)."""
    out: dict[int, list[tuple[str, float, int]]] = {}
    for e in entries:
        if e.get("action") == "timeline" and e.get("job") is not None:
            out.setdefault(int(e["job"]), []).append((str(e["stage"]), float(e["at"]), int(e.get("run", 0))))
    # A restarted controller stamps its running jobs' start again, at the same instant. Sorted
    # by run and stage, not by time: Slurm's times (submitted, started, finished) are whole
    # seconds, so a run's "started" can read a fraction of a second before its "released".
    return {j: sorted(set(stages), key=lambda s: (s[2], STAGES.index(s[0]), s[1])) for j, stages in out.items()}
