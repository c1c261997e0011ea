"""A save that cannot be written (issue 23 items 5 and 6): a file-size limit, a full
disk, a checkpoint folder that turned read-only. Real files, real limits, real
PyTorch training, real signals: one line, an Ack with ``saved: false``, the previous
checkpoint kept, the job left to the controller (it waits to be requeued), and a
later run resumes from the previous checkpoint bitwise."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.torch.jobs import job_env, last_step, poll, read_ack, run, same_weights, signal_tree, start

pytestmark = pytest.mark.torch


def _preempt(proc: subprocess.Popen, log: Path, jobdir: Path, at_step: int) -> dict:
    poll(f"step {at_step}", lambda: last_step(log) > at_step, timeout=120)
    (jobdir / "ack.json").unlink(missing_ok=True)
    signal_tree(proc.pid, signal.SIGUSR1)
    ack = poll("the Ack", lambda: read_ack(jobdir), timeout=30)
    assert proc.poll() is None, "an acked job waits to be requeued"
    signal_tree(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    return ack  # type: ignore[return-value]


def _teiresias_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "teiresias" in line or "Traceback" in line]


@pytest.fixture
def mounted(tmp_path):
    """Mount points made by the test (root only), unmounted afterwards."""
    made: list[Path] = []

    def mount(*args: str) -> None:
        r = subprocess.run(["mount", *args], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount here: {r.stderr.strip()}")
        made.append(Path(args[-1]))

    if os.getuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only folder needs root")
    yield mount
    for point in reversed(made):
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, mounted):
    """A 160 KiB tmpfs: the writes that fit succeed, the one that does not is one
    CheckpointNotWritten naming ENOSPC, its partial file removed, the others intact."""
    import torch

    from wrappers.hooks.checkpoint import CheckpointNotWritten, CheckpointStore

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted("-t", "tmpfs", "-o", "size=160k,mode=0700", "tmpfs", str(disk))
    store = CheckpointStore(disk / "1", keep=100)
    store.prepare()
    written = store.write({"w": torch.zeros(4096)}, step=1)  # 16 KiB
    with pytest.raises(CheckpointNotWritten, match=r"No space left on device"):
        store.write({"w": torch.zeros(64 * 1024)}, step=2)  # 256 KiB
    assert [p for _, _, p in store.list()] == [written.path]
    assert sorted(p.name for p in store.dir.iterdir()) == [written.path.name]
    assert torch.equal(torch.load(written.path, weights_only=True)["w"], torch.zeros(4096))


def test_saves_that_cannot_be_written_ack_saved_false_and_keep_the_previous(tmp_path, reference, mounted):
    """One job, four runs: (0) a file-size limit (ulimit -f 4 KiB) and no checkpoint yet:
    the preemption is answered at once, nothing saved, step 0 (there was a traceback and
    no Ack); (1) no limit: saved at step ~5; (2) the checkpoint folder turned read-only
    (a read-only bind mount: root writes through permission bits): the run resumes
    from the checkpoint (it restarted from step 0) and its preemption gets an Ack
    naming the kept checkpoint (there was none); (3) resumes bitwise."""
    base, out = tmp_path / "jobs", tmp_path / "out.pt"
    jobdir = base / "71"
    slow = {"TRAIN_STEP_SLEEP": "0.03"}
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    ack = _preempt(start("train_plain.py", [str(out)], job_env(base, 71, **slow), logs[0], 4096), logs[0], jobdir, 3)
    assert ack["saved"] is False and ack["step"] == 0 and ack["path"] == "" and ack["restart_count"] == 0
    (line,) = _teiresias_lines(logs[0])
    assert "not written: File too large" in line and "no earlier checkpoint exists" in line, line

    first = _preempt(start("train_plain.py", [str(out)], job_env(base, 71, 1, **slow), logs[1]), logs[1], jobdir, 5)
    assert first["saved"] is True
    ckpts = jobdir / "checkpoints"
    mounted("--bind", str(ckpts), str(ckpts))
    mounted("-o", "remount,ro,bind", str(ckpts))
    ack = _preempt(
        start("train_plain.py", [str(out)], job_env(base, 71, 2, **slow), logs[2]), logs[2], jobdir, first["step"] + 3
    )
    lines = _teiresias_lines(logs[2])
    assert len(lines) == 3 and "can be read but not written" in lines[0] and "resumed from" in lines[1], lines
    assert "not written: Read-only file system" in lines[2], lines
    assert f"step {first['step']}) is kept" in lines[2], lines
    assert ack["saved"] is False and ack["step"] == first["step"] and ack["restart_count"] == 2
    subprocess.run(["umount", str(ckpts)], check=True)
    assert [p.name for p in ckpts.iterdir()] == [Path(first["path"]).name]
    r = run("train_plain.py", [str(out)], job_env(base, 71, 3))
    assert r.returncode == 0, r.stderr
    assert f"at step {first['step']}" in r.stderr
    assert same_weights(reference, out)
