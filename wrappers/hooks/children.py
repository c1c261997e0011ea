"""The programs a hooked process starts begin with the job's signals held.

At exec a signal that has a handler goes back to its default action (POSIX),
and for USR1/USR2 that is to die. tsbatch starts the job's processes with
USR1/USR2 ignored, and sitecustomize ignores them again in a new Python, but
only from its first line: a USR1 (``scancel --full`` reaches every process of
the job) between a child's exec and that line killed it. torchrun's agent has
the hooks' handlers (it imports torch), so its workers died of a preemption
that came as they started: ``exitcode: -10 (SIGUSR1)``, the job FAILED.

So every program this process starts (``subprocess.Popen``, multiprocessing's
spawn and forkserver, ``os.exec*``, ``os.posix_spawn*``) is started with
USR1/USR2 blocked in the calling thread. A signal mask survives fork and exec:
a signal that reaches the child early stays pending, and sitecustomize ignores
the signals (which drops a pending one) before it unblocks them. A program that
is no such Python keeps them blocked, which for it is what tsbatch's ignoring
is. The parent is not deaf meanwhile: a signal that came during the call was
pending and is handled as the call returns.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from wrappers import protocol

JOB_SIGNALS = (getattr(signal, "SIG" + protocol.PREEMPT_SIGNAL), getattr(signal, "SIG" + protocol.TIMELIMIT_SIGNAL))


@contextmanager
def held() -> Iterator[None]:
    """USR1/USR2 blocked in this thread while a child is made, where this process
    handles them (an ignored signal stays ignored through exec by itself)."""
    handled = {s for s in JOB_SIGNALS if callable(signal.getsignal(s))}
    if not handled or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _wrap(owner: Any, name: str) -> None:
    original: Callable[..., Any] | None = getattr(owner, name, None)
    if original is None or getattr(original, "_teiresias_held", False):
        return

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        with held():
            return original(*args, **kwargs)

    call._teiresias_held = True  # type: ignore[attr-defined]
    setattr(owner, name, call)


def install() -> None:
    """Wrap the calls that exec a program. os.execl/execvp/... call ``os.execv`` or
    ``os.execve`` by name; multiprocessing's spawn and forkserver start their
    processes with ``multiprocessing.util.spawnv_passfds``."""
    import multiprocessing.util
    import subprocess

    _wrap(subprocess.Popen, "_execute_child")
    _wrap(multiprocessing.util, "spawnv_passfds")
    for name in ("execv", "execve", "posix_spawn", "posix_spawnp"):
        _wrap(os, name)
