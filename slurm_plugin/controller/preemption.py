"""Two-phase preemption (Tiresias §4; the job files in teiresias/jobfiles.py).

RUNNING --signal USR1--> PREEMPTING --Ack for this run, or grace over--> requeue (held) --> PENDING

The job keeps its attained service: the run segment is closed at the requeue
and the next run adds to it. The Ack's checkpoint time and size are stored
per job: the preemption cost later policies can weigh.

Jobs that checkpoint and requeue themselves (submitit, PyTorch Lightning's
``SLURMEnvironment(auto_requeue=True)``, NeMo): their batch script asks Slurm
for a warning signal (``#SBATCH --signal=[B:]SIG[@N]``) and they may be
requeued. They get *their* signal, where Slurm would send it (the batch shell
with ``B:``, else the job steps), and N seconds (Slurm's 60 when no ``@N``)
to requeue themselves or exit; reconcile sees the requeue, and the job is
held for the policy. Past N s the controller requeues it held. The rule, and
why the batch script: docs/job-states.md "Jobs that checkpoint themselves".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from slurm_plugin.controller.state import JobRecord
from teiresias.jobfiles import Ack, read_ack

# An Ack written a little before our signal time is still ours (clock skew
# between the job's node and the controller's host).
_ACK_SLACK_S = 5.0


def speaks_protocol(rec: JobRecord) -> bool:
    """Jobs launched by tsbatch (comment ``teiresias:dir=...``) checkpoint on the signal."""
    return bool(rec.files.dir)


def find_ack(rec: JobRecord) -> Ack | None:
    """The job's Ack for the run we signalled, or None (not written yet, not a tsbatch job)."""
    jobdir = rec.files.job_dir(rec.job_id)
    if jobdir is None or rec.signal_restart is None:
        return None
    ack = read_ack(jobdir)
    if ack is None or ack.job_id != rec.job_id or ack.restart_count != rec.signal_restart:
        return None
    if rec.signal_time is not None and ack.time < rec.signal_time - _ACK_SLACK_S:
        return None  # a checkpoint of this run from before our signal: not an answer to it
    return ack


# Slurm's warning time when --signal gives no @N.
DEFAULT_SIGNAL_SECONDS = 60.0
_SIGNAL_VALUE = re.compile(r"^(?:(?P<flags>[RB]+):)?(?P<sig>(?:SIG)?[A-Z0-9]+)(?:@(?P<secs>\d+))?$", re.I)


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """A job's own ``--signal``: what to send, to whom, and how long it was promised."""

    signal: str      # without "SIG": USR1, USR2, 10, ...
    scope: str       # "batch" (B:, the batch shell only) or "steps" (every job step, Slurm's default)
    seconds: float   # the time the job expects between the signal and its end
    spec: str        # as written, for messages

    def __str__(self) -> str:
        return f"--signal={self.spec}"


def signal_spec(script: str) -> SignalSpec | None:
    """The ``--signal`` of a batch script's ``#SBATCH`` header, or None.

    sbatch reads ``#SBATCH`` lines only up to the first command, and the last
    one given wins; so does this."""
    found: str | None = None
    for line in script.splitlines()[1:] if script.startswith("#!") else script.splitlines():
        text = line.strip()
        if not text:
            continue
        if not text.startswith("#"):
            break
        if not text.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(text[len("#SBATCH"):], comments=True)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if w.startswith("--signal="):
                found = w.split("=", 1)[1]
            elif w == "--signal" and i + 1 < len(words):
                found = words[i + 1]
    if not found:
        return None
    m = _SIGNAL_VALUE.match(found.strip())
    if m is None:
        return None  # sbatch would have refused it; nothing to imitate
    sig = m["sig"].upper().removeprefix("SIG")
    return SignalSpec(signal=sig, scope="batch" if "B" in (m["flags"] or "").upper() else "steps",
                      seconds=float(m["secs"]) if m["secs"] else DEFAULT_SIGNAL_SECONDS, spec=found.strip())


@dataclass(frozen=True, slots=True)
class RequeueDue:
    ack: Ack | None
    reason: str


def requeue_due(rec: JobRecord, now: float, grace_seconds: float,
                own: SignalSpec | None = None) -> RequeueDue | None:
    """Whether a PREEMPTING job should be requeued now, and why. ``own``: the
    job requeues itself on that signal; it gets the time its spec promised."""
    if own is not None:
        waited = now - (rec.signal_time or now)
        if waited >= own.seconds:
            return RequeueDue(None, f"did not requeue itself within {own.seconds:g}s of its {own.signal}")
        return None
    ack = find_ack(rec)
    if ack is not None:
        return RequeueDue(ack, f"checkpoint acknowledged (step {ack.step}, {ack.seconds:.1f}s, {ack.bytes} B)")
    waited = now - (rec.signal_time or now)
    if waited >= grace_seconds:
        return RequeueDue(None, f"no acknowledgement within the {grace_seconds:g}s grace time")
    return None
