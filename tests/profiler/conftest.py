"""Helpers for the profiler tests: the built interposer, and running real
processes under it with a deadline (no sleeps)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import profiler
from profiler.env import ProfileWindow, profiling_env

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profiler"


@pytest.fixture(scope="session")
def lib() -> Path:
    return profiler.library_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profiled_env(jobdir: Path, window: ProfileWindow = ProfileWindow(), **extra: str) -> dict[str, str]:
    """os.environ + the profiler's variables, as the job wrapper would set them."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(profiling_env(jobdir, window, base_env=env))
    env.update(extra)
    return env


def run(
    cmd: list[str], env: dict[str, str], timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


TEARDOWN_ABORT = "terminate called without an active exception"


def torchrun(
    script: Path, args: list[str], env: dict[str, str], nproc: int = 2, timeout: float = 180
) -> subprocess.CompletedProcess:
    """Start a job the way a Slurm batch script does: torchrun, one node, nproc workers.

    torch 2.13 on this machine sometimes aborts in C++ teardown after every
    rank has finished (TEARDOWN_ABORT; seen about once in 30 runs, with and
    without the profiler). Such a run did its work and counts as done; the
    model hook's atexit call has already marked its record files complete.
    """
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(script),
        *args,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    finished = proc.stderr.count("train_ddp: rank ")
    if proc.returncode != 0 and not (TEARDOWN_ABORT in proc.stderr and finished == nproc):
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def fake_nccl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build libnccl.so.2 (fake) and libmiddle.so (needs it) with gcc."""
    out = tmp_path_factory.mktemp("fake_nccl")
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wl,-soname,libnccl.so.2",
            "-o",
            str(out / "libnccl.so.2"),
            str(FIXTURES / "fake_nccl.c"),
        ],
        check=True,
    )
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            str(out / "libmiddle.so"),
            str(FIXTURES / "middle.c"),
            f"-L{out}",
            "-l:libnccl.so.2",
            "-Wl,-rpath,$ORIGIN",
        ],
        check=True,
    )
    return out
