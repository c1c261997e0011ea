"""The hooks run a job on the GPU the controller names in gpu.json (Gandiva §4.1, the
server-wide time-slicing of docs/gandiva.md) and measure how busy a job keeps its
device without NVML (runs.jsonl ``busy``: the share of step time outside the DataLoader).

No GPU here: the switch is recorded with ``local=-1`` (no CUDA index) and nothing moves;
what is checked is that the hooks read the controller's choice at the start and at a
step boundary, and that training is the same bit for bit."""

from __future__ import annotations

import time

import pytest

from tests.torch.jobs import job_env, plain_env, poll, run, same_weights, start, steps_in
from wrappers import protocol

pytestmark = pytest.mark.torch


def test_the_job_runs_on_the_gpu_gpu_json_names_and_follows_a_change(tmp_path):
    base = tmp_path / "jobs"
    jd = base / "41"
    jd.mkdir(parents=True)
    protocol.write_device(jd, protocol.Device(2, time.time()))
    env = job_env(base, 41, TRAIN_EPOCHS="2", TRAIN_STEP_SLEEP="0.05", SLURM_JOB_GPUS="0,1,2,3")
    log = tmp_path / "job.log"
    proc = start("train_plain.py", [str(tmp_path / "out.pt")], env, log)
    poll("a few steps", lambda: len(steps_in(log)) >= 4, timeout=60)
    protocol.write_device(jd, protocol.Device(3, time.time()))  # the controller moves it
    assert proc.wait(120) == 0, log.read_text()[-2000:]
    recs = protocol.read_devices(jd)
    assert [(r.gpu, r.local, r.job_id) for r in recs] == [(2, -1, 41), (3, -1, 41)]
    assert recs[0].step == 0 and 4 <= recs[1].step <= 24  # at a step boundary after the change
    ref = tmp_path / "ref.pt"
    r = run("train_plain.py", [str(ref)], plain_env(TRAIN_EPOCHS="2"))
    assert r.returncode == 0, r.stderr
    assert same_weights(ref, tmp_path / "out.pt")


def test_a_bad_gpu_json_is_named_and_the_job_stays_where_it_is(tmp_path):
    base = tmp_path / "jobs"
    (base / "42").mkdir(parents=True)
    (base / "42" / protocol.DEVICE).write_text('{"gpu": "two"}')
    r = run("train_plain.py", [str(tmp_path / "out.pt")], job_env(base, 42, TRAIN_EPOCHS="1"))
    assert r.returncode == 0, r.stderr
    assert "gpu.json" in r.stderr and "stays on its GPU" in r.stderr
    assert protocol.read_devices(base / "42") == []


def test_busy_is_the_share_of_step_time_outside_the_dataloader(tmp_path):
    base = tmp_path / "jobs"
    # Compute-bound: 50 ms after each step, no input wait. Input-bound: 150 ms in the loader.
    for job, knobs in (
        (43, {"TRAIN_STEP_SLEEP": "0.05"}),
        (44, {"TRAIN_STEP_SLEEP": "0.05", "TRAIN_LOAD_SLEEP": "0.15"}),
    ):
        r = run("train_plain.py", [str(tmp_path / f"out{job}.pt")], job_env(base, job, TRAIN_EPOCHS="1", **knobs))
        assert r.returncode == 0, r.stderr
    busy = {job: protocol.read_runs(base / str(job))[0].busy for job in (43, 44)}
    assert busy[43] is not None and busy[43] > 85.0
    assert busy[44] is not None and 10.0 < busy[44] < 40.0  # about 50 / (50 + 150)
