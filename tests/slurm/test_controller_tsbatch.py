"""The controller preempting a real PyTorch job submitted with tsbatch: the
job's hooks checkpoint on the controller's USR1, write the Ack, the
controller requeues it, and it later resumes from that checkpoint to the end."""

from __future__ import annotations

import pytest

from tests.helpers import poll
from tests.slurm.controller_support import (
    submit_sleep,
)
from tests.slurm.test_wrapper_resume import submitted, train_job, tsbatch
from tests.torch.jobs import last_step, steps_in

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def test_controller_preempts_a_tsbatch_pytorch_job_that_resumes(cluster, make_controller, tmp_path):
    ctl = make_controller(preemption={"grace_seconds": 60}).start()
    fillers = [submit_sleep(cluster, 4) for _ in range(3)]
    for f in fillers:
        cluster.wait_for(f, "RUNNING", timeout=30)
    # The PyTorch job starts last: in Q2 (FIFO by first start) it ranks lowest, so it is the victim.
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    job = submitted(
        tsbatch(
            cluster,
            f"--checkpoint-dir={tmp_path / 'ckpt'}",
            "-p",
            "gpu",
            "--gpus=4",
            "-t",
            "10",
            f"--output={log}",
            "--open-mode=append",
            str(train_job(tmp_path, "train_plain.py", out)),
            env={"TRAIN_STEP_SLEEP": "0.2", "OMP_NUM_THREADS": "1"},
        )
    )
    cluster.wait_for(job, "RUNNING", timeout=60)
    poll(
        "training under way and every job demoted to Q2",
        lambda: last_step(log) >= 3 and all(ctl.rec(j) and ctl.rec(j).queue == 1 for j in [*fillers, job]),
        120,
    )

    new = submit_sleep(cluster, 4, 20)  # Q1: needs one node's GPUs
    cluster.wait_for(new, ["RUNNING", "COMPLETED"], timeout=90)
    (rq,) = ctl.audit(job, "requeue")
    assert rq["acked"] is True and rq["ckpt_bytes"] > 0 and rq["step"] >= 3
    assert all(ctl.rec(f).preemptions == 0 for f in fillers)

    # It runs again (restart 1) from its checkpoint and trains to the end.
    done = cluster.wait_for(job, "COMPLETED", timeout=180)
    assert done.restart_count >= 1 and out.exists()
    text = log.read_text()
    assert "resumed from" in text
    steps = steps_in(log)
    assert steps.count(1) == 1, "the second run continued from the checkpoint, not from step 1"
    assert rq["step"] + 1 in steps[steps.index(rq["step"]) + 1 :] or steps[-1] > rq["step"]
    r = poll("the controller saw it finish", lambda: (x := ctl.rec(job)) and x.final_state and x, 20)
    assert r.preemptions == 1 and r.ckpt_bytes == rq["ckpt_bytes"] and r.final_state == "COMPLETED"
