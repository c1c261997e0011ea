"""A running job's measured use, from its job dir onto its record (GPU truth).

The hooks inside every tsbatch job rewrite ``<jobdir>/usage.<node>.json``
every few seconds (wrappers/hooks/usage.py). Each round the controller reads
them for its running tsbatch jobs, at most every ``READ_EVERY_S`` per job,
and keeps the sum over the job's nodes on the record (``JobRecord.gpu_util``,
``gpu_mem_used``, ``gpu_mem_total``, ``cpu_percent``, ``rss_bytes``,
``usage_time``, ``usage_note``): `teiresias queue` shows them and the
policy's ``Job.usage`` carries them. A job that does not run has none.
"""

from __future__ import annotations

from slurm_plugin.controller import channel
from slurm_plugin.controller.state import JobRecord
from teiresias.domain import JobUsage
from teiresias.jobfiles import UsageSample, read_usage

# A job's files are read no more often than this (a shared file system with
# many running jobs); samples come every 5 s.
READ_EVERY_S = 10.0


def combine(samples: list[UsageSample], restart_count: int) -> tuple[JobUsage, str] | None:
    """The current run's samples summed over nodes; None without any.
    GPU figures only when every node has them: a partial sum would be a wrong total."""
    mine = [s for s in samples if s.restart_count == restart_count]
    if not mine:
        return None
    gpu = all(s.gpu_util is not None and s.gpu_mem_used is not None for s in mine)
    weights = sum(max(s.gpus, 1) for s in mine)
    util = sum((s.gpu_util or 0.0) * max(s.gpus, 1) for s in mine) / weights if gpu else None
    note = "" if gpu else next((f"{s.node}: {s.gpu_note}" for s in mine if s.gpu_note), "no GPU figures")
    return JobUsage(
        time=min(s.time for s in mine),
        gpu_util=None if util is None else round(util, 1),
        gpu_mem_used=sum(s.gpu_mem_used or 0 for s in mine) if gpu else None,
        gpu_mem_total=sum(s.gpu_mem_total or 0 for s in mine) if gpu else None,
        cpu_percent=round(sum(s.cpu_percent for s in mine), 1),
        rss_bytes=sum(s.rss_bytes for s in mine),
    ), note


def set_usage(rec: JobRecord, found: tuple[JobUsage, str] | None) -> None:
    u, note = found if found is not None else (None, "")
    rec.gpu_util = u.gpu_util if u else None
    rec.gpu_mem_used = u.gpu_mem_used if u else None
    rec.gpu_mem_total = u.gpu_mem_total if u else None
    rec.cpu_percent = u.cpu_percent if u else None
    rec.rss_bytes = u.rss_bytes if u else None
    rec.usage_time = u.time if u else None
    rec.usage_note = note


def of_record(rec: JobRecord) -> JobUsage | None:
    """The policy-facing view of what the record holds."""
    if rec.usage_time is None or rec.cpu_percent is None or rec.rss_bytes is None:
        return None
    return JobUsage(rec.usage_time, rec.gpu_util, rec.gpu_mem_used, rec.gpu_mem_total, rec.cpu_percent, rec.rss_bytes)


def read_for(rec: JobRecord) -> tuple[JobUsage, str] | None:
    """File I/O: the record's job dir (tsbatch jobs only; others have none)."""
    jobdir = channel.folder(rec)
    if jobdir is None:
        return None
    return combine(read_usage(jobdir), rec.restart_count)
