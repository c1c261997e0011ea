"""Timing: each run's median iteration time, for the controller's PACKLIMIT
history (Tiresias §3.3.2) and Themis' work left (jobfiles.RunRecord in runs.jsonl),
and how busy the job keeps its device: the share of each step's wall time spent
outside the DataLoader's ``__next__`` (``RunRecord.busy``), the utilisation
Gandiva's packing ranks jobs by where NVML cannot measure it (§4.2.2).

The first steps of a run (allocator and cache warm-up, DDP bucket rebuild)
are left out; the last STEP_WINDOW intervals are kept; rank 0 appends the
run's figure at most every RUN_WRITE_EVERY_S, plus at checkpoints and exit.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from wrappers import protocol
from wrappers.hooks.signals import say

WARMUP_STEPS = 3
STEP_WINDOW = 2048
RUN_WRITE_EVERY_S = 60.0


class StepTimer:
    """A few float operations per step; ``may_write()`` says whether this process
    writes (rank 0 of a job whose checkpoints are enabled)."""

    def __init__(
        self,
        env: os._Environ[str] | dict[str, str],
        jobdir: Path,
        job_id: str,
        restart_count: int,
        may_write: Callable[[], bool],
    ) -> None:
        self.env = env
        self.jobdir = jobdir
        self.job_id = job_id
        self.restart_count = restart_count
        self.may_write = may_write
        self._step_s: deque[float] = deque(maxlen=STEP_WINDOW)
        self._busy: deque[float] = deque(maxlen=STEP_WINDOW)  # share of each step outside the loader
        self._wait = 0.0  # seconds in the DataLoader since the last step
        self._step_t: float | None = None  # perf_counter at the last optimizer step
        self._warmup = WARMUP_STEPS
        self._steps_timed = 0
        self._run_written = time.perf_counter()

    def tick(self) -> None:
        """An optimizer step ended; the file is written at most every RUN_WRITE_EVERY_S."""
        t = time.perf_counter()
        if self._step_t is not None:
            if self._warmup > 0:
                self._warmup -= 1
            else:
                dt = t - self._step_t
                self._step_s.append(dt)
                self._busy.append(max(0.0, 1.0 - self._wait / dt) if dt > 0 else 1.0)
                self._steps_timed += 1
        self._step_t = t
        self._wait = 0.0
        if self._steps_timed and t - self._run_written >= RUN_WRITE_EVERY_S:
            self.write_run()

    def pause(self) -> None:
        """The job was stopped (suspended): the stopped time is not a slow step."""
        self._step_t = None
        self._wait = 0.0

    def waited(self, seconds: float) -> None:
        """The script waited ``seconds`` for its next batch (patches.py, DataLoader.__next__)."""
        self._wait += seconds

    def write_run(self) -> None:
        """Rank 0 appends this run's median iteration time to runs.jsonl (protocol.RunRecord)."""
        self._run_written = time.perf_counter()
        if not self._step_s or not self.job_id or not self.may_write():
            return
        ordered = sorted(self._step_s)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
        nodes = int(self.env.get("SLURM_JOB_NUM_NODES") or self.env.get("SLURM_NNODES") or 0)
        try:
            protocol.append_run(
                self.jobdir,
                protocol.RunRecord(
                    job_id=int(self.job_id),
                    restart_count=self.restart_count,
                    steps=self._steps_timed,
                    median_step_s=round(median, 6),
                    nodes=nodes,
                    time=time.time(),
                    busy=round(100.0 * sum(self._busy) / len(self._busy), 1) if self._busy else None,
                ),
            )
        except (OSError, ValueError) as exc:
            say(f"warning: iteration time not recorded: {exc}")
