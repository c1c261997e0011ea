"""The NCCL layer without a GPU: a fake libnccl.so.2 built here, loaded
RTLD_LOCAL through another library (as torch loads the real one), is
interposed, reaches the real (fake) functions and is recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profiler.aggregate import aggregate_dir
from profiler.env import ProfileWindow, profile_dir
from profiler.records import FileState, Kind, read_record_file, record_files
from tests.profiler.conftest import FIXTURES, profiled_env, run

DRIVER = FIXTURES / "nccl_driver.py"


def drive(fake_nccl: Path, jobdir: Path, rank: int, world: int, iters: int, **extra: str) -> dict:
    env = profiled_env(jobdir, ProfileWindow(seconds=60), RANK=str(rank), WORLD_SIZE=str(world), **extra)
    proc = run([sys.executable, str(DRIVER), str(fake_nccl), str(iters)], env, timeout=60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rtld_local_nccl_is_interposed_and_recorded(fake_nccl: Path, tmp_path: Path) -> None:
    out = drive(fake_nccl, tmp_path, 0, 2, 5)
    # libnccl really was hidden from the global scope, and every call still
    # reached it through the interposer (4 per iteration + 3 point-to-point).
    assert out["pnccl_global"] is False
    assert out["rc"] == 0
    assert out["fake_calls"] == 5 * 4 + 3
    [f] = record_files(profile_dir(tmp_path))
    rf = read_record_file(f)
    assert rf.state is FileState.EXITED and rf.rank == 0 and rf.world_size == 2
    r = rf.records
    assert len(r) == 5 * 4 + 3
    ar = rf.of_kind(Kind.NCCL_ALLREDUCE)
    assert ar["bytes"][:3].tolist() == [4000, 1_000_000, 20_000]  # count x 4 (float32)
    assert set(ar["nranks"].tolist()) == {2}  # from ncclCommCount
    ag = rf.of_kind(Kind.NCCL_ALLGATHER)
    assert ag["bytes"].tolist() == [256 * 2 * 2] * 5  # per-rank count x fp16 x nranks
    assert rf.of_kind(Kind.NCCL_SEND)["bytes"].tolist() == [800]
    assert rf.of_kind(Kind.NCCL_RECV)["bytes"].tolist() == [800]
    assert rf.of_kind(Kind.NCCL_BROADCAST)["bytes"].tolist() == [80]
    assert r["opcode"].tolist() == list(range(1, len(r) + 1))  # call order


def test_nccl_profile_of_two_ranks(fake_nccl: Path, tmp_path: Path) -> None:
    for rank in (0, 1):
        drive(fake_nccl, tmp_path, rank, 2, 8)
    p = aggregate_dir(profile_dir(tmp_path))
    assert p.valid, p.reason
    assert p.layer == "nccl"
    assert p.collectives_per_iteration == 4
    total = 4000 + 1_000_000 + 20_000 + 1024
    assert p.skew == pytest.approx(1_000_000 / total)
    assert p.period_s is not None and p.period_s > 0.002


def test_missing_libnccl_is_reported_not_crashed(lib: Path, tmp_path: Path) -> None:
    # A process that calls ncclAllReduce through the interposer with no libnccl
    # loaded at all gets ncclInternalError (3) and a one-line warning.
    code = "import ctypes; f = ctypes.CDLL(None).ncclAllReduce; print(f(None, None, 1, 7, 0, None, None))"
    env = profiled_env(tmp_path, TEIRESIAS_NCCL_LIB="libnccl-absent.so.2")
    proc = run([sys.executable, "-c", code], env)
    assert proc.stdout.strip() == "3"
    assert "real libnccl not found" in proc.stderr
