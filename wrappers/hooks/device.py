"""Which GPU of its node a job runs on, when the controller may change it (Gandiva §4.1, §5.2).

A 1-GPU job that joined an over-subscribed node holds a shard of each of the
node's GPUs (docs/gandiva.md "Server-wide time-slicing"): Slurm gives it all
of them in CUDA_VISIBLE_DEVICES, and the controller names the one to use in
``gpu.json`` in the folder it writes the job's settings to (the spool's ``.in``
folder, else the job directory: docs/admin.md "The control channel";
jobfiles.Device, by Slurm's index). The hooks read it
when the run starts (before the script makes CUDA tensors, so "cuda" means
that GPU), after every resume, and at step boundaries (the file's mtime, at
most every CHECK_EVERY_S); on a change they move the training state to the
new GPU at the step boundary (suspend.offload / restore, as a suspension does:
Gandiva's "change of GPU within the same server" done by the toolkit), and
rank 0 appends a DeviceRecord to devices.jsonl.

Without CUDA (the CPU test machines) nothing moves; the choice is recorded
with ``local=-1``, so the control flow is tested. A script that names
``cuda:0`` itself, rather than "cuda" or the current device, is not moved.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from wrappers import protocol
from wrappers.hooks.suspend import offload, restore
from wrappers.hooks.usage import job_gpus

CHECK_EVERY_S = 1.0


class DeviceSwitch:
    """One per process; ``wanted`` is cheap enough to call after every step."""

    def __init__(
        self,
        env: Mapping[str, str],
        settings: Callable[[], Path | None],
        ctldir: Path,
        job_id: str,
        restart_count: int,
    ) -> None:
        self.gpus = job_gpus(env)  # Slurm's indices in CUDA order (CUDA index i is the i-th)
        # Where the controller's gpu.json is (None: no folder it may be trusted in), and the
        # control folder the switches are recorded in (devices.jsonl).
        self.settings = settings
        self.ctldir = ctldir
        self.job_id = job_id
        self.restart_count = restart_count
        self.current: int | None = None
        self._mtime: float | None = None
        self._checked = 0.0

    def local(self, gpu: int) -> int:
        """The CUDA index of Slurm's GPU ``gpu`` in this job, -1 when it has none (no CUDA)."""
        if str(gpu) not in self.gpus or not torch.cuda.is_available():
            return -1
        return self.gpus.index(str(gpu))

    def wanted(self, force: bool = False) -> int | None:
        """The GPU the controller named, if it is not the one in use; None otherwise."""
        now = time.monotonic()
        if not force and now - self._checked < CHECK_EVERY_S:
            return None
        self._checked = now
        folder = self.settings()
        if folder is None:
            return None
        path = folder / protocol.DEVICE
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return None
        if mtime == self._mtime and not force:
            return None
        self._mtime = mtime
        try:
            dev = protocol.read_device(folder)
        except protocol.DeviceInvalid as exc:
            print(f"teiresias: warning: {exc}; the job stays on its GPU", file=sys.stderr, flush=True)
            return None
        if dev is None or dev.gpu == self.current:
            return None
        return dev.gpu

    def start(self, rank: int) -> None:
        """At the run's start: make the named GPU the current CUDA device before any tensor."""
        gpu = self.wanted(force=True)
        if gpu is None:
            return
        local = self.local(gpu)
        if local >= 0:
            torch.cuda.set_device(local)
        self._record(gpu, local, 0, rank)

    def switch(self, gpu: int, step: int, models: list[torch.nn.Module], optimizers: list[Any], rank: int) -> None:
        """Move the training state to Slurm's GPU ``gpu`` at this step boundary."""
        local = self.local(gpu)
        if local >= 0:
            moved = offload(models, optimizers)
            torch.cuda.set_device(local)
            restore(moved, torch.device("cuda", local))
        self._record(gpu, local, step, rank)

    def _record(self, gpu: int, local: int, step: int, rank: int) -> None:
        self.current = gpu
        if rank != 0 or not self.job_id:
            return
        try:
            protocol.append_device(
                self.ctldir,
                protocol.DeviceRecord(int(self.job_id), self.restart_count, step, gpu, local, round(time.time(), 6)),
            )
        except (OSError, ValueError) as exc:
            print(f"teiresias: warning: GPU switch not recorded: {exc}", file=sys.stderr, flush=True)
