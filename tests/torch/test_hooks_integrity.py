"""What the hooks load: a damaged newest checkpoint is set aside for the
newest valid older one, a hollow one is refused without a traceback, a file
naming unsafe globals is refused by name and never trusted, and a preemption
recorded before the hooks were ready is honoured. Real PyTorch training,
outside Slurm (fake SLURM_* variables, real signals)."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.torch.jobs import job_env, last_step, poll, read_ack, run, same_weights, signal_tree, start
from wrappers import protocol
from wrappers.hooks.checkpoint import FORMAT, CheckpointInvalid, CheckpointRefused, CheckpointStore

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def every_five(tmp_path_factory) -> Path:
    """The checkpoints of a run that saved every 5 steps (5, 10, ..., 35)."""
    tmp = tmp_path_factory.mktemp("every5")
    r = run(
        "train_plain.py",
        [str(tmp / "full.pt")],
        job_env(tmp / "jobs", 3, TEIRESIAS_CHECKPOINT_EVERY="5", TEIRESIAS_CHECKPOINT_KEEP="100"),
    )
    assert r.returncode == 0, r.stderr
    return tmp / "jobs" / "3" / "checkpoints"


def job_with(tmp_path: Path, every_five: Path, job: int, steps: list[int]) -> Path:
    """A job directory holding copies of the checkpoints of ``steps`` (oldest first)."""
    ckdir = tmp_path / "jobs" / str(job) / "checkpoints"
    ckdir.mkdir(parents=True, mode=0o700)
    os.chmod(ckdir.parent, 0o700)
    for s in steps:
        (src,) = every_five.glob(f"ckpt-*-step{s}.pt")
        shutil.copy2(src, ckdir / src.name)
    return ckdir


def flip_tensor_bytes(path: Path) -> None:
    """Overwrite 4 bytes in the middle of the largest tensor's data (the zip stays well-formed)."""
    with zipfile.ZipFile(path) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        old = f.read(4)
        f.seek(-4, os.SEEK_CUR)
        f.write(bytes(b ^ 0x5A for b in old))


def hollow(path: Path) -> None:
    """Right format tag, no content: what a hand-made or half-written file looks like."""
    torch.save({"format": FORMAT, "step": 5}, path)


DAMAGE = {
    "4 bytes of tensor data": flip_tensor_bytes,
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "hollow": hollow,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_newest_checkpoint_is_set_aside_for_the_newest_valid_one(tmp_path, reference, every_five, damage):
    ckdir = job_with(tmp_path, every_five, 40, [25, 30, 35])
    (newest,) = ckdir.glob("*-step35.pt")
    DAMAGE[damage](newest)
    out = tmp_path / "out.pt"
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 40, 1))
    assert r.returncode == 0, r.stderr
    ours = [line for line in r.stderr.splitlines() if line.startswith("teiresias:")]
    assert len(ours) == 2, ours  # the one line about the damaged file, the usual "resumed from"
    assert newest.name in ours[0] and "set aside as" in ours[0] and "step30.pt (step 30)" in ours[0]
    assert ("corrupt" if damage != "hollow" else "hollow or malformed") in ours[0]
    assert protocol.ENV_TRUST not in r.stderr
    assert ours[1].endswith("at step 30")
    assert same_weights(reference, out)
    assert not newest.exists() and len(list(ckdir.glob(newest.name + ".refused-*"))) == 1


def test_only_damaged_checkpoints_stop_the_job_with_exit_2(tmp_path, every_five):
    ckdir = job_with(tmp_path, every_five, 41, [30, 35])
    for p in ckdir.iterdir():
        flip_tensor_bytes(p)
    r = run("train_plain.py", [str(tmp_path / "out.pt")], job_env(tmp_path / "jobs", 41, 1))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("teiresias:")]
    assert "no valid checkpoint" in line and "CRC-32 mismatch" in line and "1 older" in line
    assert protocol.ENV_START_FRESH in line and protocol.ENV_TRUST not in line
    assert len(list(ckdir.glob("ckpt-*.pt"))) == 2  # nothing renamed: a person decides
    assert not (tmp_path / "out.pt").exists()


def test_hollow_checkpoint_is_one_line_and_start_fresh_sets_it_aside(tmp_path, reference):
    ckdir = tmp_path / "jobs" / "42" / "checkpoints"
    ckdir.mkdir(parents=True, mode=0o700)
    os.chmod(ckdir.parent, 0o700)
    ck = ckdir / "ckpt-000001-step5.pt"
    hollow(ck)
    out = tmp_path / "out.pt"
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 42, 1))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("teiresias:")]
    assert "hollow or malformed" in line and ck.name in line
    r = run("train_plain.py", [str(out)], job_env(tmp_path / "jobs", 42, 1, TEIRESIAS_START_FRESH="1"))
    assert r.returncode == 0, r.stderr
    assert "starting fresh" in r.stderr and not ck.exists()
    assert len(list(ckdir.glob(ck.name + ".refused-*"))) == 1
    assert same_weights(reference, out)


class _RunsAShell:
    """Unpickling this calls posix.system: what a tampered checkpoint would hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_naming_code_globals_is_refused_by_name_and_never_trusted(tmp_path, every_five):
    ckdir = job_with(tmp_path, every_five, 43, [30])
    (ck,) = ckdir.iterdir()
    marker = tmp_path / "payload-ran"
    data = torch.load(ck, weights_only=True)
    data["shared"]["registered"]["x"] = _RunsAShell(marker)
    torch.save(data, ck)  # a well-formed zip: the CRCs are right, only the content is hostile
    for trust in ("", "1", "posix.system_not"):
        env = job_env(tmp_path / "jobs", 43, 1, **({protocol.ENV_TRUST: trust} if trust else {}))
        r = run("train_plain.py", [str(tmp_path / "out.pt")], env)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("teiresias:")]
        assert "posix.system" in line and "could run code" in line
        assert protocol.ENV_TRUST not in line
        assert not marker.exists()


def test_torch_and_numpy_types_are_suggested_by_name_and_allowed_by_name(tmp_path):
    store = CheckpointStore(tmp_path / "job")
    store.prepare()
    local = {
        "rng": {"python": {"version": 3, "state": [], "gauss": None}, "torch": torch.get_rng_state()},
        "iterators": [],
        "loader_gens": [],
        "point": {"kind": "none", "ord": -1, "n": -1, "pos": -1},
    }
    payload = {
        "format": FORMAT,
        "step": 1,
        "world_size": 1,
        "optimizer_steps": [1],
        "ranks": [local],
        "shared": {
            "models": [],
            "optimizers": [],
            "schedulers": [],
            "scalers": [],
            "registered": {"best": {"value": np.float64(0.25)}},
        },
    }
    path = store.write(payload, 1).path
    with pytest.raises(CheckpointRefused) as refused:
        store.load(path)
    msg = str(refused.value)
    assert not isinstance(refused.value, CheckpointInvalid)
    names = msg.split(f"{protocol.ENV_TRUST}=")[1]
    assert "numpy" in names and "dtype" in names
    data = store.load(path, trust=names)
    assert data["shared"]["registered"]["best"]["value"] == 0.25


def test_preemption_recorded_before_the_hooks_were_ready_is_honoured(tmp_path):
    """The batch shell recorded a USR1 that came before this process could
    handle it: the hooks preempt at the first step and ack, then wait."""
    base, log = tmp_path / "jobs", tmp_path / "run.log"
    jobdir = base / "44"
    jobdir.mkdir(parents=True, mode=0o700)
    (jobdir / protocol.PREEMPT_REQUEST.format(restart=1)).touch()
    (jobdir / protocol.PREEMPT_REQUEST.format(restart=0)).touch()  # an earlier run's: removed
    proc = start("train_plain.py", [str(tmp_path / "out.pt")], job_env(base, 44, 1, TRAIN_STEP_SLEEP="0.03"), log)
    try:
        ack = poll("the Ack", lambda: read_ack(jobdir), timeout=60)
        assert ack["restart_count"] == 1 and ack["saved"] is True and ack["step"] == 1
        assert proc.poll() is None, "a preempted job must wait to be requeued"
        assert last_step(log) <= 2
        assert list(jobdir.glob("started.1.*")) and not (jobdir / "preempt-requested.0").exists()
    finally:
        signal_tree(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
