"""Suspend at the mini-batch boundary (Gandiva §3.1, §5.2): the in-job half of time-slicing.

``scontrol suspend`` sends SIGTSTP to every process of the job and SIGSTOP
about 2 s later (../shared/notes/gpu-sharing-on-slurm.md §4); ``scontrol
resume`` sends SIGCONT. Gandiva suspends where GPU memory use is lowest,
right after a mini-batch: activations are gone, only weights and optimizer
state remain. So on SIGTSTP the hooks only set a flag; after the next
``optimizer.step()`` (all ranks agree on it with the stop all-reduce, so they
park after the same step) they:

1. move every CUDA tensor of the training state (model parameters, their
   gradients, buffers, optimizer state) to the host and empty the CUDA
   caching allocator, so a co-tenant on the same GPU gets the memory;
2. stop themselves with SIGSTOP (Slurm's own SIGSTOP then finds them stopped);
3. on SIGCONT move the tensors back and go on with the next mini-batch.

Without a GPU step 1 moves nothing: the control flow is the same.

A step longer than Slurm's 2 s gap is caught mid-step by Slurm's SIGSTOP;
then the SIGCONT handler clears the flag, so the process does not park again
after the resume (nobody would wake it). The remaining race, a SIGCONT that
comes between that check and our own SIGSTOP, needs a resume within
microseconds of Slurm's SIGSTOP; the controller resumes a slice later.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from wrappers import protocol


@dataclass
class _Moved:
    """Tensors moved to the host, with how to put each one back."""

    back: list[Callable[..., None]] = field(default_factory=list)
    bytes: int = 0


def offload(models: list[torch.nn.Module], optimizers: list[Any]) -> _Moved:
    """Move the CUDA tensors of the training state to the host, keeping every
    Parameter object (optimizers and DDP hold them); a no-op without CUDA tensors."""
    moved = _Moved()
    seen: set[int] = set()

    def move_param(t: torch.Tensor) -> None:
        if id(t) in seen or not t.is_cuda:
            return
        seen.add(id(t))
        device = t.device
        moved.bytes += t.numel() * t.element_size()
        t.data = t.data.to("cpu", non_blocking=False)

        def back(to: torch.device | None = None, t: torch.Tensor = t, device: torch.device = device) -> None:
            t.data = t.data.to(to or device)

        moved.back.append(back)

    for model in models:
        for p in model.parameters():
            move_param(p)
            if p.grad is not None:
                move_param(p.grad)
        for b in model.buffers():
            move_param(b)
    for opt in optimizers:
        for state in opt.state.values():
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor) and value.is_cuda:
                    device = value.device
                    moved.bytes += value.numel() * value.element_size()
                    state[key] = value.to("cpu")

                    def back_state(
                        to: torch.device | None = None,
                        state: dict[str, Any] = state,
                        key: str = key,
                        device: torch.device = device,
                    ) -> None:
                        state[key] = state[key].to(to or device)

                    moved.back.append(back_state)
    if moved.back and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return moved


def restore(moved: _Moved, to: torch.device | None = None) -> None:
    """Put the tensors back where they were, or (``to``) on another GPU (device.py)."""
    for back in moved.back:
        back(to)
    if moved.back:
        torch.cuda.synchronize()


class Suspender:
    """One per process; the Runtime calls ``wanted`` at each step and ``park`` once all ranks agree."""

    def __init__(self, jobdir: Path, job_id: str, restart_count: int) -> None:
        self.jobdir = jobdir
        self.job_id = job_id
        self.restart_count = restart_count
        self.requested = False
        self.signalled = 0.0
        self.continued = 0  # SIGCONTs seen: one after the TSTP means Slurm stopped and resumed us already

    def install(self, can_park: Callable[[], bool]) -> None:
        """Handlers for SIGTSTP and SIGCONT. ``can_park``: False for a process
        that will never reach a step boundary (torchrun's agent, a job waiting to
        be requeued); such a process stops at once, as without the hooks."""

        def on_tstp(signum: int, frame: Any) -> None:
            if not can_park():
                os.kill(os.getpid(), signal.SIGSTOP)
                return
            self.requested = True
            self.signalled = time.time()
            self._cont_at_tstp = self.continued

        def on_cont(signum: int, frame: Any) -> None:
            self.continued += 1
            self.requested = False

        self._cont_at_tstp = 0
        signal.signal(signal.SIGTSTP, on_tstp)
        signal.signal(signal.SIGCONT, on_cont)

    def park(self, step: int, models: list[torch.nn.Module], optimizers: list[Any], rank: int) -> None:
        """Offload, stop until SIGCONT, reload; rank 0 records the slice."""
        self.requested = False
        signalled = self.signalled or time.time()
        moved = offload(models, optimizers)
        parked = 0.0
        if self.continued == self._cont_at_tstp:
            parked = time.time()
            os.kill(os.getpid(), signal.SIGSTOP)  # returns after SIGCONT
        resumed = time.time()
        restore(moved)
        self.signalled = 0.0
        if rank != 0 or not self.job_id:
            return
        try:
            protocol.append_slice(
                self.jobdir,
                protocol.SliceRecord(
                    job_id=int(self.job_id),
                    restart_count=self.restart_count,
                    step=step,
                    signalled=round(signalled, 6),
                    parked=round(parked, 6),
                    resumed=round(resumed, 6),
                    offloaded_bytes=moved.bytes,
                ),
            )
        except (OSError, ValueError) as exc:
            print(f"teiresias: warning: time slice not recorded: {exc}", file=sys.stderr, flush=True)
