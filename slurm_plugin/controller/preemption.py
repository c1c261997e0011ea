"""Two-phase preemption (issue 3; protocol in wrappers/protocol.py).

RUNNING --signal USR1--> PREEMPTING --Ack for this run, or grace over--> requeue (held) --> PENDING

The job keeps its attained service: the run segment is closed at the requeue
and the next run adds to it. The Ack's checkpoint time and size are stored
per job: the preemption cost later policies can weigh.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_plugin.controller.state import JobRecord
from wrappers.protocol import Ack, job_dir, parse_comment, read_ack

# An Ack written a little before our signal time is still ours (clock skew
# between the job's node and the controller's host).
_ACK_SLACK_S = 5.0


def speaks_protocol(rec: JobRecord) -> bool:
    """Jobs launched by tsbatch (comment ``teiresias:dir=...``) checkpoint on the signal."""
    return bool(parse_comment(rec.comment).get("dir"))


def find_ack(rec: JobRecord) -> Ack | None:
    """The job's Ack for the run we signalled, or None (not written yet, not a tsbatch job)."""
    base = parse_comment(rec.comment).get("dir")
    if not base or rec.signal_restart is None:
        return None
    ack = read_ack(job_dir(base, rec.job_id))
    if ack is None or ack.job_id != rec.job_id or ack.restart_count != rec.signal_restart:
        return None
    if rec.signal_time is not None and ack.time < rec.signal_time - _ACK_SLACK_S:
        return None  # a checkpoint of this run from before our signal: not an answer to it
    return ack


@dataclass(frozen=True, slots=True)
class RequeueDue:
    ack: Ack | None
    reason: str


def requeue_due(rec: JobRecord, now: float, grace_seconds: float) -> RequeueDue | None:
    """Whether a PREEMPTING job should be requeued now, and why."""
    ack = find_ack(rec)
    if ack is not None:
        return RequeueDue(ack, f"checkpoint acknowledged (step {ack.step}, {ack.seconds:.1f}s, {ack.bytes} B)")
    waited = now - (rec.signal_time or now)
    if waited >= grace_seconds:
        return RequeueDue(None, f"no acknowledgement within the {grace_seconds:g}s grace time")
    return None
