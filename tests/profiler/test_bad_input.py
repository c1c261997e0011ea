"""Recording window, size cap and bad input: every damaged or unprofilable run
gives a clear "no profile" (valid=False with a reason), never a wrong skew.
Record files come from real processes (the fake-NCCL driver, ~0.2 s each)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.aggregate import aggregate_dir
from profiler.env import ProfileWindow, profile_dir
from profiler.records import FileState, RecordFileError, read_record_file, record_files
from tests.profiler.conftest import FIXTURES, profiled_env, run

DRIVER = FIXTURES / "nccl_driver.py"


def drive(
    fake_nccl: Path, jobdir: Path, rank: int, world: int, iters: int, window: ProfileWindow = ProfileWindow(seconds=60)
) -> None:
    env = profiled_env(jobdir, window, RANK=str(rank), WORLD_SIZE=str(world))
    run([sys.executable, str(DRIVER), str(fake_nccl), str(iters)], env, timeout=60)


@pytest.fixture(scope="module")
def good_job(fake_nccl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid 2-rank profile; tests damage copies of it."""
    jobdir = tmp_path_factory.mktemp("good")
    for rank in (0, 1):
        drive(fake_nccl, jobdir, rank, 2, 8)
    assert aggregate_dir(profile_dir(jobdir)).valid
    return profile_dir(jobdir)


def copy_of(good: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "profile"
    shutil.copytree(good, dst)
    return dst


def test_missing_rank_file(good_job: Path, tmp_path: Path) -> None:
    d = copy_of(good_job, tmp_path)
    [r1] = [p for p in record_files(d) if p.name.startswith("rank1-")]
    r1.unlink()
    p = aggregate_dir(d)
    assert not p.valid and p.skew is None
    assert "rank(s) [1] missing" in p.reason


def test_truncated_record_file(good_job: Path, tmp_path: Path) -> None:
    d = copy_of(good_job, tmp_path)
    f = record_files(d)[0]
    with open(f, "r+b") as fh:
        fh.truncate(128 + 64 * 5)  # header says ~35 records
    with pytest.raises(RecordFileError, match="truncated"):
        read_record_file(f)
    p = aggregate_dir(d)
    assert not p.valid and p.skew is None and "truncated" in p.reason


def test_not_a_record_file(good_job: Path, tmp_path: Path) -> None:
    d = copy_of(good_job, tmp_path)
    f = record_files(d)[0]
    f.write_bytes(b"x" * 4096)
    p = aggregate_dir(d)
    assert not p.valid and "bad magic" in p.reason


def test_empty_or_absent_profile_dir(tmp_path: Path) -> None:
    assert "no profile directory" in aggregate_dir(tmp_path / "nope").reason
    (tmp_path / "empty").mkdir()
    p = aggregate_dir(tmp_path / "empty")
    assert not p.valid and "no record files" in p.reason


def test_single_rank_job(fake_nccl: Path, tmp_path: Path) -> None:
    drive(fake_nccl, tmp_path, 0, 1, 8)
    p = aggregate_dir(profile_dir(tmp_path))
    assert not p.valid and p.skew is None and "single-rank" in p.reason


def test_too_few_iterations(fake_nccl: Path, tmp_path: Path) -> None:
    for rank in (0, 1):
        drive(fake_nccl, tmp_path, rank, 2, 2)
    p = aggregate_dir(profile_dir(tmp_path))
    assert not p.valid and p.skew is None and p.reason.startswith("too few iterations recorded")


def test_job_killed_mid_profile(fake_nccl: Path, tmp_path: Path) -> None:
    drive(fake_nccl, tmp_path, 1, 2, 8)
    env = profiled_env(tmp_path, ProfileWindow(seconds=60), RANK="0", WORLD_SIZE="2")
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), str(fake_nccl), "10", "--forever"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()  # blocks until 10 iterations are recorded
        assert json.loads(line)["ready"]
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    [f0] = [p for p in record_files(profile_dir(tmp_path)) if p.name.startswith("rank0-")]
    rf = read_record_file(f0)
    assert rf.state is FileState.RECORDING and len(rf.records) >= 40  # the records survived the kill
    p = aggregate_dir(profile_dir(tmp_path))
    assert not p.valid and p.skew is None and "killed mid-profile" in p.reason


def test_window_closes_after_its_seconds(fake_nccl: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    drive(fake_nccl, tmp_path, 0, 2, 400, ProfileWindow(seconds=0.3))
    elapsed = time.monotonic() - t0
    rf = read_record_file(record_files(profile_dir(tmp_path))[0])
    assert rf.state is FileState.WINDOW_DONE
    assert rf.records["t_ns"].max() < 0.3e9
    assert 0 < len(rf.records) < 400 * 4, (len(rf.records), elapsed)


def test_size_cap(fake_nccl: Path, tmp_path: Path) -> None:
    drive(fake_nccl, tmp_path, 0, 2, 100, ProfileWindow(seconds=60, max_bytes=4096))
    f = record_files(profile_dir(tmp_path))[0]
    assert f.stat().st_size == 4096 - (4096 - 128) % 64
    rf = read_record_file(f)
    assert rf.state is FileState.FULL
    assert len(rf.records) == (4096 - 128) // 64 and rf.dropped >= 1


def drive_env(fake_nccl: Path, jobdir: Path, iters: int, **launcher: str) -> None:
    env = profiled_env(jobdir, ProfileWindow(seconds=60))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        env.pop(k, None)
    env.update(launcher)
    run([sys.executable, str(DRIVER), str(fake_nccl), str(iters)], env, timeout=60)


def test_ranks_from_srun_variables(fake_nccl: Path, tmp_path: Path) -> None:
    # srun without torchrun: SLURM_PROCID / SLURM_NTASKS name the ranks.
    for rank in (0, 1):
        drive_env(fake_nccl, tmp_path, 8, SLURM_PROCID=str(rank), SLURM_NTASKS="2")
    assert sorted(read_record_file(f).rank for f in record_files(profile_dir(tmp_path))) == [0, 1]
    drive_env(fake_nccl, tmp_path / "b", 8, SLURM_PROCID="0", SLURM_NTASKS="2")
    assert "rank(s) [1] missing" in aggregate_dir(profile_dir(tmp_path / "b")).reason
    assert aggregate_dir(profile_dir(tmp_path)).valid


def test_ranks_unknown_are_numbered(fake_nccl: Path, tmp_path: Path) -> None:
    for _ in (0, 1):
        drive_env(fake_nccl, tmp_path, 8)
    p = aggregate_dir(profile_dir(tmp_path))
    assert p.valid and p.ranks == 2 and any("ranks unknown" in n for n in p.notes)


@pytest.mark.parametrize("hook", [True, False])
def test_abort_in_teardown_after_a_normal_exit(fake_nccl: Path, tmp_path: Path, hook: bool) -> None:
    # With the model hook's atexit call the file is marked complete before the
    # abort; without it the run is indistinguishable from a kill.
    env = profiled_env(tmp_path, ProfileWindow(seconds=60), RANK="0", WORLD_SIZE="2")
    args = [sys.executable, str(DRIVER), str(fake_nccl), "8", "--abort-at-exit"] + (["--hook"] if hook else [])
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGABRT
    rf = read_record_file(record_files(profile_dir(tmp_path))[0])
    assert rf.state is (FileState.EXITED if hook else FileState.RECORDING)


def test_requeued_job_uses_its_latest_run(fake_nccl: Path, tmp_path: Path) -> None:
    # Run 0 was killed mid-profile (rank 0 never closed its file); the job was
    # requeued (SLURM_RESTART_COUNT=1) and profiled again into the same folder.
    drive_env(fake_nccl, tmp_path, 8, RANK="1", WORLD_SIZE="2", SLURM_RESTART_COUNT="0")
    env = profiled_env(tmp_path, ProfileWindow(seconds=60), RANK="0", WORLD_SIZE="2", SLURM_RESTART_COUNT="0")
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), str(fake_nccl), "5", "--forever"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert json.loads(proc.stdout.readline())["ready"]
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert "killed mid-profile" in aggregate_dir(profile_dir(tmp_path)).reason
    for rank in (0, 1):
        drive_env(fake_nccl, tmp_path, 8, RANK=str(rank), WORLD_SIZE="2", SLURM_RESTART_COUNT="1")
    assert len(record_files(profile_dir(tmp_path))) == 4
    p = aggregate_dir(profile_dir(tmp_path))
    assert p.valid, p.reason
    assert any("using the latest" in n for n in p.notes)
