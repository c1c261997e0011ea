"""What a job really uses: NVML for its GPUs, psutil for its processes.

One sampler per node of a job (the first process there to take
``usage.<node>.lock`` in the job directory: with torchrun both the agent and
its workers load the hooks) rewrites ``usage.<node>.json`` every
``TEIRESIAS_USAGE_EVERY`` seconds (default 5) from a daemon thread
(wrappers/protocol.py, ``UsageSample``). The controller shows the figures in
`teiresias queue` and puts them on the policy's ``Job.usage``.

The job's GPUs are Slurm's indices (``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS``,
which are NVML's with ``AutoDetect=nvml`` or a gres.conf in nvidia-smi order),
else ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-``/``MIG-`` UUIDs). Without
NVML (no driver, no GPU) the GPU fields are None and ``gpu_note`` says why;
the CPU side works everywhere.

The job's processes on the node: the process group our process is in and
everything below its leader (tsbatch runs the script in a group of its own,
so that is the script, torchrun's agent and its workers), else our own process
and its children.

Cost (docs/benchmarks.md "Usage sampling", benchmarks/bench_usage.py): one
sample, file written, takes 2-4 ms of CPU for 1-20 processes without NVML;
every 5 s that is 0.04-0.08% of one core (the NVML reads on a real GPU are
not measured here: no GPU).
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from wrappers import protocol

DEFAULT_EVERY_S = 5.0


def _say(msg: str) -> None:
    print(f"teiresias: {msg}", file=sys.stderr, flush=True)


def job_gpus(env: Mapping[str, str]) -> list[str]:
    """The job's GPUs on this node as NVML can name them (index or UUID)."""
    for key in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(key, "").strip()
        if value and value not in ("NoDevFiles", "-1"):
            return [v.strip() for v in value.split(",") if v.strip()]
    return []


class Nvml:
    """Utilization and memory of some GPUs; ``open`` returns (None, why) without NVML."""

    def __init__(self, lib: Any, handles: list[Any]) -> None:
        self.lib = lib
        self.handles = handles

    @classmethod
    def open(cls, gpus: list[str], lib: Any = None) -> tuple[Nvml | None, str]:
        if not gpus:
            return None, "no GPU assigned to the job on this node"
        try:
            if lib is None:
                import pynvml  # nvidia-ml-py

                lib = pynvml
            lib.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: the normal case off GPUs
            return None, f"NVML unavailable ({_nvml_text(exc)})"
        handles = []
        try:
            for g in gpus:
                if g.isdigit():
                    handles.append(lib.nvmlDeviceGetHandleByIndex(int(g)))
                else:
                    handles.append(lib.nvmlDeviceGetHandleByUUID(g))
        except Exception as exc:
            return None, f"NVML cannot open GPU {g} ({_nvml_text(exc)})"
        return cls(lib, handles), ""

    def read(self) -> tuple[float, int, int]:
        """(mean utilization %, memory used, memory total) over the GPUs."""
        util = [self.lib.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
        mems = [self.lib.nvmlDeviceGetMemoryInfo(h) for h in self.handles]
        return (sum(util) / len(util), sum(int(m.used) for m in mems), sum(int(m.total) for m in mems))


def _nvml_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def tree_root() -> psutil.Process:
    """The leader of our process group when it is alive, else ourselves."""
    try:
        return psutil.Process(os.getpgid(0))
    except (psutil.Error, OSError):
        return psutil.Process()


class Sampler:
    """One node's samples. ``sample()`` is synchronous (tests call it directly)."""

    def __init__(
        self,
        jobdir: Path,
        job_id: int,
        restart_count: int,
        node: str,
        gpus: list[str],
        root: psutil.Process,
        nvml_open: Callable[[list[str]], tuple[Nvml | None, str]] = Nvml.open,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobdir = jobdir
        self.job_id = job_id
        self.restart_count = restart_count
        self.node = node
        self.gpus = gpus
        self.root = root
        self.clock = clock
        self.nvml, self.note = nvml_open(gpus)
        # cpu_percent is measured since the previous call on the *same* Process object.
        self._procs: dict[int, psutil.Process] = {}

    def _tree(self) -> list[psutil.Process]:
        try:
            found = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            found = []
        procs = []
        for p in found:
            kept = self._procs.get(p.pid)
            if kept is None or not kept.is_running():  # is_running also catches a reused pid
                kept = self._procs[p.pid] = p
                try:
                    kept.cpu_percent(None)  # the first call only starts the measurement
                except psutil.Error:
                    continue
            procs.append(kept)
        alive = {p.pid for p in procs}
        self._procs = {pid: p for pid, p in self._procs.items() if pid in alive}
        return procs

    def sample(self) -> protocol.UsageSample:
        cpu, rss, count = 0.0, 0, 0
        for p in self._tree():
            try:
                with p.oneshot():
                    cpu += p.cpu_percent(None)
                    rss += p.memory_info().rss
                count += 1
            except psutil.Error:
                continue  # ended between the listing and the read
        util = used = total = None
        note = self.note
        if self.nvml is not None:
            try:
                util, used, total = self.nvml.read()
            except Exception as exc:
                note = f"NVML read failed ({_nvml_text(exc)})"
        return protocol.UsageSample(
            job_id=self.job_id,
            restart_count=self.restart_count,
            node=self.node,
            time=self.clock(),
            gpus=len(self.gpus),
            gpu_util=None if util is None else round(util, 1),
            gpu_mem_used=used,
            gpu_mem_total=total,
            cpu_percent=round(cpu, 1),
            rss_bytes=rss,
            processes=count,
            gpu_note=note,
        )

    def write(self) -> None:
        protocol.write_usage(self.jobdir, self.sample())


def _take_lock(jobdir: Path, node: str) -> int | None:
    """The node's sampler lock (held until the process ends), or None when another process has it."""
    fd = os.open(jobdir / f"usage.{node}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def start(env: Mapping[str, str], jobdir: Path, job_id: str, restart_count: int) -> threading.Thread | None:
    """Start this node's sampler thread, unless off, not in a job, or another process samples."""
    try:
        every = float(env.get(protocol.ENV_USAGE_EVERY, DEFAULT_EVERY_S) or DEFAULT_EVERY_S)
    except ValueError:
        _say(
            f"warning: {protocol.ENV_USAGE_EVERY}={env.get(protocol.ENV_USAGE_EVERY)!r} is not a number of"
            f" seconds; sampling every {DEFAULT_EVERY_S:g}s"
        )
        every = DEFAULT_EVERY_S
    if every <= 0 or not job_id.isdigit():
        return None
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        if _take_lock(jobdir, node) is None:
            return None
        sampler = Sampler(jobdir, int(job_id), restart_count, node, job_gpus(env), tree_root())
    except (OSError, psutil.Error) as exc:
        _say(f"warning: resource usage not sampled: {exc}")
        return None

    def loop() -> None:
        stop = threading.Event()
        while True:
            try:
                sampler.write()
            except (OSError, psutil.Error) as exc:
                _say(f"warning: resource usage sampling stopped: {exc}")
                return
            stop.wait(every)

    thread = threading.Thread(target=loop, name="teiresias-usage", daemon=True)
    thread.start()
    return thread
