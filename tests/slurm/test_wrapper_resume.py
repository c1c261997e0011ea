"""tsbatch end to end on the real local Slurm cluster with real PyTorch CPU
training: preemption through the controller protocol (USR1 --full, Ack,
requeue), DDP, SIGKILL during a write, the time limit, and a script without
torch. Helpers for running jobs are in tests/torch/jobs.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_plugin.backends.base import requeue_settle_wait
from slurm_plugin.localcluster import CLUSTER_NAME
from tests.torch.jobs import SCRIPTS, last_step, plain_env, poll, read_ack, same_weights
from wrappers import protocol

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

TSBATCH = str(Path(sys.executable).with_name("tsbatch"))
PY = sys.executable


def tsbatch(cluster, *args: str, env: dict[str, str] | None = None, stdin: str | None = None):
    return subprocess.run(
        [TSBATCH, *args], env={**cluster.env, **(env or {})}, capture_output=True, text=True, timeout=60, input=stdin
    )


def submitted(r: subprocess.CompletedProcess) -> int:
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout)
    assert m, r.stdout
    return int(m.group(1))


def submit_training(
    cluster, base: Path, log: Path, batch: Path, *options: str, env: dict[str, str] | None = None
) -> int:
    """``tsbatch OPTIONS BATCH``, checkpoints under ``base`` and the output of every run
    appended to ``log``: the job id. ``env`` (default: 0.05 s per step, one torch thread)
    is added to the cluster's."""
    env = {"TRAIN_STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"} if env is None else env
    args = [f"--checkpoint-dir={base}", f"--output={log}", "--open-mode=append", *options, str(batch)]
    return submitted(tsbatch(cluster, *args, env=env))


def train_job(tmp_path: Path, script: str, out: Path, launcher: str = "") -> Path:
    batch = tmp_path / "train.sh"
    batch.write_text(f"#!/bin/bash\n#SBATCH -c 2\ncd {tmp_path}\n{launcher or PY} {SCRIPTS / script} {out}\n")
    return batch


def preempt_via_protocol(cluster, job: int, jobdir: Path, log: Path, at_step: int, restart: int) -> dict:
    """What the controller does (wrappers/protocol.py): USR1 to the whole job,
    wait for the Ack of this run, requeue, clear the BeginTime, wait until it runs."""
    poll(f"step {at_step}", lambda: last_step(log) >= at_step, timeout=120)
    cluster.backend.signal(job, protocol.PREEMPT_SIGNAL)
    ack = poll("the Ack", lambda: (a := read_ack(jobdir)) and a["restart_count"] == restart and a, timeout=60)
    assert cluster.job(job).state == "RUNNING", "a job that acked must wait to be requeued"
    reached = last_step(log)
    requeue_and_restart(cluster, job, restart + 1)
    ack["reached"] = reached
    return ack


def requeue_and_restart(cluster, job: int, restarts: int) -> None:
    """Requeue held, then release once the wall clock is in a later second:
    slurmd refuses to start a job on a node in the same second its previous
    run's credential was revoked ("Job credential revoked": the job FAILS)."""
    cluster.backend.requeue(job, hold=True)
    start_when_safe(cluster, job, restarts)
    cluster.wait_for(job, "RUNNING", timeout=60)


def start_when_safe(cluster, job: int, restarts: int) -> None:
    """Once the job is PENDING after its ``restarts``-th requeue, let it start
    (release, clear the requeue BeginTime) in a later wall-clock second than the
    requeue: slurmd refuses a job whose credential was revoked in the same
    second ("Job credential revoked", and the job FAILS)."""
    j = cluster.wait_for(job, "PENDING", timeout=90, where=lambda j: j.restart_count == restarts)
    time.sleep(requeue_settle_wait(j, time.time()))
    if j.held:
        cluster.backend.release(job)
    cluster.backend.clear_begin_time(job)


def test_preempted_twice_resumes_bitwise_equal(clean_slurm, tmp_path, reference):
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submit_training(clean_slurm, base, log, train_job(tmp_path, "train_plain.py", out))
    j = clean_slurm.job(job)
    assert j.requeue and protocol.parse_comment(j.comment)["dir"] == str(base)
    jobdir = protocol.job_dir(base, job, CLUSTER_NAME)
    acks = [preempt_via_protocol(clean_slurm, job, jobdir, log, at, k) for k, at in enumerate([6, 22])]
    clean_slurm.wait_for(job, "COMPLETED", timeout=120)
    assert same_weights(reference, out)
    for ack in acks:
        assert ack["reached"] - ack["step"] <= 1, "more than one iteration lost"
    assert 6 <= acks[0]["step"] < acks[1]["step"]
    assert [r.reason for r in protocol.read_records(jobdir)] == ["preempt", "preempt"]
    assert oct(os.stat(jobdir).st_mode & 0o777) == "0o700"
    assert "resumed from" in log.read_text()


def test_ddp_two_ranks_preempted_resumes_bitwise_equal(clean_slurm, tmp_path):
    ref, out, log = tmp_path / "ref.pt", tmp_path / "out.pt", tmp_path / "job.out"
    torchrun = str(Path(PY).with_name("torchrun")) + " --standalone --nproc-per-node=2"
    r = subprocess.run(
        f"{torchrun} {SCRIPTS / 'train_ddp.py'} {ref}",
        shell=True,
        env=plain_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    base = tmp_path / "ckpt"
    job = submit_training(clean_slurm, base, log, train_job(tmp_path, "train_ddp.py", out, launcher=torchrun))
    acks = [
        preempt_via_protocol(clean_slurm, job, protocol.job_dir(base, job, CLUSTER_NAME), log, at, k)
        for k, at in enumerate([5, 16])
    ]
    clean_slurm.wait_for(job, "COMPLETED", timeout=180)
    assert same_weights(ref, out)
    assert all(a["reached"] - a["step"] <= 1 for a in acks)
    ck = protocol.read_records(protocol.job_dir(base, job, CLUSTER_NAME))
    assert len(ck) == 2  # rank 0 alone wrote, once per preemption
    # Each requeue SIGTERMs torchrun's agent: its SignalException must not print a traceback.
    text = log.read_text()
    assert "Traceback" not in text and "SignalException" not in text, text[-3000:]


GRACE_S = 30  # the controller's default grace_seconds (etc/teiresias.yaml)


def test_preempt_right_after_a_restart_is_acked_well_before_the_grace(clean_slurm, tmp_path, reference):
    """USR1 while the restarted run has not imported torch yet (its script
    sleeps first, so this is certain): the batch shell acks at once with
    "nothing new to save", the controller need not wait out its grace time,
    and the job still resumes from its checkpoint and ends bitwise equal."""
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    batch = tmp_path / "train.sh"
    batch.write_text(f"#!/bin/bash\n#SBATCH -c 2\ncd {tmp_path}\nsleep 3\n{PY} {SCRIPTS / 'train_plain.py'} {out}\n")
    job = submit_training(clean_slurm, base, log, batch)
    jobdir = protocol.job_dir(base, job, CLUSTER_NAME)
    first = preempt_via_protocol(clean_slurm, job, jobdir, log, 6, 0)  # back RUNNING as restart 1
    sent = time.time()
    clean_slurm.backend.signal(job, protocol.PREEMPT_SIGNAL)
    ack = poll(
        "the restarted run's Ack",
        lambda: (a := read_ack(jobdir)) and a["restart_count"] == 1 and a,
        timeout=GRACE_S / 3,
    )
    assert ack["time"] - sent < 5, "the Ack must come well before the grace time"
    assert ack["saved"] is False and ack["step"] == first["step"] and ack["path"] == ""
    assert clean_slurm.job(job).state == "RUNNING", "an acked job waits to be requeued"
    requeue_and_restart(clean_slurm, job, 2)
    clean_slurm.wait_for(job, "COMPLETED", timeout=120)
    assert same_weights(reference, out)
    assert f"at step {first['step']}" in log.read_text()


def test_term_to_the_whole_job_reaches_the_training_process(clean_slurm, tmp_path, reference):
    """``scancel --signal=TERM --full``: the training process saves and exits 143 (it
    runs in a session of its own, which Slurm's --full does not reach here: the batch
    shell forwards TERM as it forwards USR1/USR2). Requeued, it resumes bitwise."""
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submit_training(clean_slurm, base, log, train_job(tmp_path, "train_plain.py", out))
    jobdir = protocol.job_dir(base, job)
    poll("step 6", lambda: last_step(log) >= 6, timeout=120)
    subprocess.run(["scancel", "--signal=TERM", "--full", str(job)], env=clean_slurm.env, check=True)
    records = poll("the SIGTERM checkpoint", lambda: protocol.read_records(jobdir), timeout=30)
    assert [r.reason for r in records] == ["term"]
    clean_slurm.wait_for(job, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=60)
    assert "SIGTERM: checkpoint at step" in log.read_text()
    clean_slurm.backend.requeue(job, hold=False)
    start_when_safe(clean_slurm, job, 1)
    clean_slurm.wait_for(job, "COMPLETED", timeout=120, where=lambda j: j.restart_count == 1)
    assert f"at step {records[0].step}" in log.read_text()
    assert same_weights(reference, out)


def test_sigkill_during_checkpoint_write_resumes_from_previous(clean_slurm, tmp_path, reference):
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submit_training(
        clean_slurm,
        base,
        log,
        train_job(tmp_path, "train_plain.py", out),
        "--checkpoint-every=5",
        env={protocol.ENV_TEST_PAUSE: "2", "OMP_NUM_THREADS": "1"},
    )
    jobdir = protocol.job_dir(base, job, CLUSTER_NAME)
    marker = poll("the writer to pause mid-write", lambda: (jobdir / "test-paused-2").is_file(), timeout=120)
    pid = json.loads((jobdir / "test-paused-2").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    clean_slurm.wait_for(job, {"FAILED", "COMPLETED"}, timeout=60)
    assert marker
    names = sorted(p.name for p in (jobdir / "checkpoints").iterdir())
    assert "ckpt-000001-step5.pt" in names and any(n.endswith(".tmp") for n in names)
    # The job has ended: no hold (Slurm refuses to update an ended job's AdminComment,
    # the controller's hold mark); requeue's ~120 s BeginTime keeps it pending instead.
    clean_slurm.backend.requeue(job, hold=False)
    start_when_safe(clean_slurm, job, 1)
    clean_slurm.wait_for(job, "COMPLETED", timeout=120, where=lambda j: j.restart_count == 1)
    assert "resumed from ckpt-000001-step5.pt at step 5" in log.read_text()
    assert same_weights(reference, out)


def test_timelimit_signal_saves_requeues_itself_and_finishes(clean_slurm, tmp_path, reference):
    """The fast variant: the time-limit warning (B:USR2, to the batch shell only)
    sent by hand; the job saves, runs ``scontrol requeue`` on itself and later finishes."""
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submit_training(clean_slurm, base, log, train_job(tmp_path, "train_plain.py", out))
    poll("step 8", lambda: last_step(log) >= 8, timeout=120)
    subprocess.run(
        ["scancel", f"--signal={protocol.TIMELIMIT_SIGNAL}", "--batch", str(job)], env=clean_slurm.env, check=True
    )
    start_when_safe(clean_slurm, job, 1)
    clean_slurm.wait_for(job, "COMPLETED", timeout=120)
    assert [r.reason for r in protocol.read_records(protocol.job_dir(base, job, CLUSTER_NAME))] == ["timelimit"]
    assert same_weights(reference, out)


@pytest.mark.slow
def test_real_time_limit_requeues_and_finishes(clean_slurm, tmp_path, reference):
    """--time=1 (Slurm's minimum) on a job that needs about 94 s of training (36 steps of
    2.6 s): the real warning comes (Slurm sends it up to a minute early), the job saves
    and requeues itself, maybe several times, and a later run finishes. Slurm checks
    time limits only every ~30 s, so a job needing less than ~90 s (it was 43 s) could
    finish in its first run before any warning came."""
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submit_training(
        clean_slurm,
        base,
        log,
        train_job(tmp_path, "train_plain.py", out),
        "--time=1",
        env={"TRAIN_STEP_SLEEP": "2.6", protocol.ENV_GRACE: "40", "OMP_NUM_THREADS": "1"},
    )

    def finished_or_requeued():
        j = clean_slurm.job(job)
        if j.state == "PENDING" and j.restart_count >= 1:
            start_when_safe(clean_slurm, job, j.restart_count)  # else Slurm's ~120 s requeue delay
        assert j.state not in {"FAILED", "CANCELLED", "TIMEOUT"}, j.state
        return j.state == "COMPLETED" and j

    final = poll("the job to finish across time limits", finished_or_requeued, timeout=420, every=1)
    assert final.restart_count >= 1
    assert "timelimit" in [r.reason for r in protocol.read_records(protocol.job_dir(base, job, CLUSTER_NAME))]
    assert same_weights(reference, out)
