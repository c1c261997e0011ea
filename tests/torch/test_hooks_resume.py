"""Checkpoint/resume hooks on real PyTorch CPU training, outside Slurm
(fake SLURM_* variables, real signals). The Slurm end-to-end tests are in
tests/slurm/test_wrapper_*.py."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import side_by_side
from tests.torch.jobs import (
    job_env,
    last_step,
    plain_env,
    poll,
    preempt,
    read_ack,
    run,
    same_weights,
    start,
)
from wrappers import protocol

pytestmark = pytest.mark.torch


def test_preempted_twice_resumes_bitwise_equal(tmp_path, reference):
    base, jobdir = tmp_path / "jobs", tmp_path / "jobs" / "41"
    out, log = tmp_path / "out.pt", tmp_path / "run.log"
    acks = []
    for restart, at_step in [(0, 5), (1, 20)]:
        proc = start("train_plain.py", [str(out)], job_env(base, 41, restart, TRAIN_STEP_SLEEP="0.03"), log)
        acks.append(preempt(proc, log, jobdir, at_step))
        # At most one iteration lost: the job did not get past the checkpointed step + 1.
        assert last_step(log) - acks[-1]["step"] <= 1
        assert acks[-1]["restart_count"] == restart
    assert acks[0]["step"] >= 5 and acks[1]["step"] >= 20
    r = run("train_plain.py", [str(out)], job_env(base, 41, 2))
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stderr and f"at step {acks[1]['step']}" in r.stderr
    assert same_weights(reference, out)
    records = protocol.read_records(jobdir)
    assert [r.reason for r in records] == ["preempt", "preempt"]
    assert all(r.bytes > 0 and r.seconds > 0 for r in records)
    assert oct(os.stat(jobdir).st_mode & 0o777) == "0o700"


@pytest.fixture(scope="module")
def every_step(tmp_path_factory) -> Path:
    """A run that checkpointed after every step (periodic, every 1)."""
    tmp = tmp_path_factory.mktemp("every")
    r = run(
        "train_plain.py",
        [str(tmp / "full.pt")],
        job_env(tmp / "jobs", 5, TEIRESIAS_CHECKPOINT_EVERY="1", TEIRESIAS_CHECKPOINT_KEEP="100"),
    )
    assert r.returncode == 0, r.stderr
    return tmp / "jobs" / "5" / "checkpoints"


@pytest.mark.parametrize("step", [12, 13])
def test_resume_from_any_step_is_bitwise_equal(tmp_path, reference, every_step, step):
    """Resume from a checkpoint in the middle of an epoch, at an epoch's last
    batch and at the first batch of the next one."""
    base = tmp_path / "jobs"
    (base / "5" / "checkpoints").mkdir(parents=True, mode=0o700)
    os.chmod(base / "5", 0o700)
    (ck,) = every_step.glob(f"ckpt-*-step{step}.pt")
    shutil.copy2(ck, base / "5" / "checkpoints" / ck.name)
    out = tmp_path / "resumed.pt"
    r = run("train_plain.py", [str(out)], job_env(base, 5, 1))
    assert r.returncode == 0, r.stderr
    assert f"at step {step}" in r.stderr
    assert same_weights(reference, out)


@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_workers_resume_bitwise_equal(tmp_path, reference, persistent):
    """Worker processes; persistent workers make their iterator once and reset it
    each epoch (a different draw order from the loader's generator)."""
    base, out, log = tmp_path / "jobs", tmp_path / "out.pt", tmp_path / "run.log"
    env = dict(TRAIN_WORKERS="2", TRAIN_PERSISTENT="1" if persistent else "0")
    proc = start("train_plain.py", [str(out)], job_env(base, 6, TRAIN_STEP_SLEEP="0.03", **env), log)
    if persistent:  # its own uninterrupted run, beside the preempted one
        reference = tmp_path / "ref.pt"
        plain = start("train_plain.py", [str(reference)], plain_env(**env), tmp_path / "ref.log")
    preempt(proc, log, base / "6", 15)  # in the second epoch: the iterator was reset once
    if persistent:
        assert plain.wait(timeout=120) == 0, (tmp_path / "ref.log").read_text()[-2000:]
    r = run("train_plain.py", [str(out)], job_env(base, 6, 1, **env))
    assert r.returncode == 0, r.stderr
    assert same_weights(reference, out)


def test_sigterm_saves_and_exits(tmp_path, reference):
    base, out, log = tmp_path / "jobs", tmp_path / "out.pt", tmp_path / "run.log"
    proc = start("train_plain.py", [str(out)], job_env(base, 7, TRAIN_STEP_SLEEP="0.03"), log)
    poll("step 8", lambda: last_step(log) >= 8)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert read_ack(base / "7") is None  # an Ack answers only the controller's preemption
    assert [r.reason for r in protocol.read_records(base / "7")] == ["term"]
    r = run("train_plain.py", [str(out)], job_env(base, 7, 1))
    assert r.returncode == 0, r.stderr
    assert same_weights(reference, out)


def test_sigkill_during_write_keeps_previous_checkpoint(tmp_path, reference):
    base, out, log = tmp_path / "jobs", tmp_path / "out.pt", tmp_path / "run.log"
    jobdir = base / "8"
    env = job_env(base, 8, TEIRESIAS_CHECKPOINT_EVERY="5", TEIRESIAS_TEST_PAUSE_IN_WRITE="2")
    proc = start("train_plain.py", [str(out)], env, log)
    marker = poll("the writer to pause", lambda: (jobdir / "test-paused-2").exists() and jobdir / "test-paused-2")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    names = sorted(p.name for p in (jobdir / "checkpoints").iterdir())
    assert len(names) == 2 and "ckpt-000001-step5.pt" in names
    assert any(n.startswith(".ckpt-000002-step10.pt.") and n.endswith(".tmp") for n in names)
    r = run("train_plain.py", [str(out)], {**env, "SLURM_RESTART_COUNT": "1"})
    assert r.returncode == 0, r.stderr
    assert "at step 5" in r.stderr
    assert same_weights(reference, out)
    assert not any(p.name.endswith(".tmp") for p in (jobdir / "checkpoints").iterdir())
    assert marker.exists()


@pytest.fixture(scope="module")
def preempted_job(tmp_path_factory) -> Path:
    """The job directory of a run preempted after step 3 (one checkpoint)."""
    base = tmp_path_factory.mktemp("preempted") / "jobs"
    log = base.parent / "first.log"
    proc = start("train_plain.py", [str(base.parent / "x.pt")], job_env(base, 1, TRAIN_STEP_SLEEP="0.03"), log)
    preempt(proc, log, base / "1", 3)
    return base / "1"


@pytest.fixture
def one_checkpoint(tmp_path, preempted_job) -> Callable[[int], Path]:
    def copy(job: int) -> Path:
        shutil.copytree(preempted_job, tmp_path / "jobs" / str(job))
        (ck,) = (tmp_path / "jobs" / str(job) / "checkpoints").iterdir()
        return ck

    return copy


def test_corrupt_checkpoint_is_refused_unless_fresh_start_asked(tmp_path, reference, one_checkpoint):
    ck = one_checkpoint(9)
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.pt"
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 9, 1))
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("teiresias:")]
    assert len(errors) == 1 and "corrupt" in errors[0] and "TEIRESIAS_START_FRESH=1" in errors[0]
    assert not out.exists()
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 9, 1, TEIRESIAS_START_FRESH="1"))
    assert r.returncode == 0, r.stderr
    assert "starting fresh" in r.stderr
    assert same_weights(reference, out)


@pytest.mark.skipif(os.getuid() != 0, reason="making a file foreign needs chown (root)")
def test_foreign_checkpoint_is_refused(tmp_path, one_checkpoint):
    ck = one_checkpoint(10)
    os.chown(ck, 65534, 65534)
    r = run("train_plain.py", [str(tmp_path / "out.pt")], job_env(tmp_path / "jobs", 10, 1))
    assert r.returncode == 2
    assert "refusing foreign checkpoint" in r.stderr and "uid 65534" in r.stderr


def test_group_writable_checkpoint_is_refused(tmp_path, one_checkpoint):
    ck = one_checkpoint(11)
    os.chmod(ck, 0o666)
    r = run("train_plain.py", [str(tmp_path / "out.pt")], job_env(tmp_path / "jobs", 11, 1))
    assert r.returncode == 2
    assert "writable by group or others" in r.stderr


def test_unwritable_checkpoint_dir_warns_once_and_trains(tmp_path, reference):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = tmp_path / "out.pt"
    r = run("train_plain.py", [str(out)], job_env(blocker / "jobs", 12, TEIRESIAS_CHECKPOINT_EVERY="2"))
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "teiresias" in line]
    assert len(warnings) == 1 and "checkpoints disabled" in warnings[0] and str(blocker) in warnings[0]
    assert same_weights(reference, out)


def test_hooks_change_nothing_without_a_signal(tmp_path, reference):
    out = tmp_path / "out.pt"
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 13))
    assert r.returncode == 0 and r.stderr == ""
    assert same_weights(reference, out)
    assert not (tmp_path / "jobs" / "13" / "checkpoints").exists() or not any(
        (tmp_path / "jobs" / "13" / "checkpoints").iterdir()
    )


@pytest.mark.parametrize("persistent", ["0", "1"])
def test_resume_after_early_break_is_bitwise_equal(tmp_path, persistent):
    """Checkpoint at step 10, where the script's next data request makes a new
    epoch's iterator (the previous one was left with ``break``)."""
    ref, out, base = tmp_path / "ref.pt", tmp_path / "out.pt", tmp_path / "jobs"
    env = job_env(base, 30, TRAIN_PERSISTENT=persistent, TEIRESIAS_CHECKPOINT_EVERY="10", TEIRESIAS_CHECKPOINT_KEEP="1")
    plain, r = side_by_side(  # the uninterrupted run beside the checkpointed one
        lambda: run("train_break.py", [str(ref)], plain_env(TRAIN_PERSISTENT=persistent)),
        lambda: run("train_break.py", [str(tmp_path / "first.pt")], env),
    )
    assert plain.returncode == 0, plain.stderr
    assert r.returncode == 0, r.stderr
    (ck,) = (base / "30" / "checkpoints").iterdir()
    assert ck.name.endswith("-step10.pt")
    r = run("train_break.py", [str(out)], {**env, "TEIRESIAS_CHECKPOINT_EVERY": "0", "SLURM_RESTART_COUNT": "1"})
    assert r.returncode == 0, r.stderr
    assert "at step 10" in r.stderr
    assert same_weights(ref, out)
