"""Signals in: what each one asks of the job, and the ways out of the process.

A signal handler only records a ``Stop`` (the Runtime reads it at the next
step boundary, docs/checkpointing.md): PREEMPT_SIGNAL (USR1, the
controller), TIMELIMIT_SIGNAL (USR2, Slurm shortly before the time limit),
SIGTERM (Slurm is about to kill the job). After a save the job either waits
to be requeued, requeues itself, or leaves at once (``exit_now``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from enum import IntEnum
from typing import Any, NoReturn

from wrappers import protocol


class Stop(IntEnum):
    """Why a checkpoint is taken; with several ranks the largest wins."""

    NONE = 0
    PERIODIC = 1
    API = 2
    PREEMPT = 3
    TIMELIMIT = 4
    TERM = 5


SIGNAL_STOP = {
    getattr(signal, "SIG" + protocol.PREEMPT_SIGNAL): Stop.PREEMPT,
    getattr(signal, "SIG" + protocol.TIMELIMIT_SIGNAL): Stop.TIMELIMIT,
    signal.SIGTERM: Stop.TERM,
}


def say(msg: str) -> None:
    print(f"teiresias: {msg}", file=sys.stderr, flush=True)


def wait_for_requeue() -> NoReturn:
    """Checkpoint and Ack are written: the controller requeues us (SIGTERM, which
    the Runtime's handler answers by leaving)."""
    sys.stdout.flush()
    while True:
        time.sleep(3600)


def requeue_self(job_id: str) -> None:
    """``scontrol requeue`` this job (a time limit came and nobody requeued us)."""
    if not job_id:
        return
    try:
        # USR1/USR2 ignored in scontrol (SIG_IGN survives exec): a repeated
        # warning forwarded to our descendants must not kill it mid-request.
        subprocess.run(
            ["scontrol", "requeue", job_id], check=True, capture_output=True, timeout=30, preexec_fn=ignore_job_signals
        )
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"warning: scontrol requeue {job_id} failed: {exc}")


def quiet_launcher_signal(previous: Callable[..., Any]) -> Callable[..., Any]:
    """torchrun's agent turns SIGTERM into a SignalException that nobody
    catches: at every requeue (and cancel) its traceback landed in the job's
    output. The agent has already stopped its workers when it gets here (and
    logged one line saying so); leave as a process killed by that signal would."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        if exc_type.__name__ == "SignalException" and exc_type.__module__.startswith("torch.distributed.elastic"):
            exit_now(128 + int(getattr(exc, "sigval", signal.SIGTERM)))
        previous(exc_type, exc, tb)

    return hook


def ignore_job_signals() -> None:
    """USR1/USR2 ignored, as tsbatch starts the job's processes. At exit (atexit):
    Python's finalization puts the default action back on every signal with a
    Python handler, and the default action of USR1 is to die (exit 138, the
    job FAILED and not requeued); a preemption that comes after the last step
    must find a process that ends as it would have (issue 20 B2)."""
    for signum in SIGNAL_STOP:
        if signum != signal.SIGTERM:
            signal.signal(signum, signal.SIG_IGN)


def exit_now(code: int) -> NoReturn:
    """Leave at once: no atexit handlers (a process group teardown could hang)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
