"""Issue 20 B11 live: files left under a job's id by another job never steer it.

A tsbatch job is held at submission (etc/job_submit.lua); while it waits, the
test plants what an earlier job with the same id would have left: a
``preempt-requested.0`` marker where job directories used to be keyed by the
id alone (``<base>/<id>``: a second cluster sharing the home, or this one
before a reset), and a whole job directory of another incarnation (another
key) in the current layout ``<base>/<ClusterName>/<id>``. Released, the job
must train to its end: before the fix it took the marker for its own
preemption, checkpointed at step 1 and idled its GPU while RUNNING.
"""

from __future__ import annotations

import pytest

from slurm_plugin.localcluster import CLUSTER_NAME
from tests.helpers import poll
from tests.slurm.test_wrapper_resume import submit_training, train_job
from wrappers import protocol

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def test_markers_of_another_incarnation_are_ignored(cluster, tmp_path):
    out, log, base = tmp_path / "out.pt", tmp_path / "job.out", tmp_path / "ckpt"
    job = submit_training(cluster, base, log, train_job(tmp_path, "train_plain.py", out), "-p", "gpu", "--gpus=1")
    assert cluster.job(job).held, "job_submit.lua holds a GPU job at submission"
    old_layout = base / str(job)
    old_layout.mkdir(parents=True)
    (old_layout / "preempt-requested.0").touch()
    earlier = protocol.job_dir(base, job, CLUSTER_NAME)
    earlier.mkdir(parents=True)
    (earlier / protocol.KEY_FILE).write_text("feedfacefeedface\n")
    (earlier / "preempt-requested.0").touch()
    (earlier / "checkpoints").mkdir()
    cluster.backend.release(job)
    ended = poll(
        "the job to end or to take a stale marker for a preemption",
        lambda: (
            cluster.job(job).state in ("COMPLETED", "FAILED")
            or "preempted" in (log.read_text() if log.exists() else "")
        ),
        timeout=180,
    )
    assert ended
    text = log.read_text()
    assert "preempted" not in text, text[-2000:]
    assert cluster.wait_for(job, "COMPLETED", timeout=60).state == "COMPLETED"
    # the earlier incarnation's folder was set aside whole; this job's holds its own key
    mine = protocol.parse_comment(cluster.job(job).comment)["key"]
    assert (earlier / protocol.KEY_FILE).read_text().strip() == mine
    assert not (earlier / "preempt-requested.0").exists()
    assert [p for p in earlier.parent.iterdir() if p.name.startswith(f"{job}.stale.")]
