"""PACKLIMIT history, live: real tsbatch PyTorch jobs report their iteration time,
and the running controller stores each ended run with its real placement.

The refit itself (enough spread runs of both kinds, policy rebuilt, audit entry)
is covered by tests/unit/test_controller_packlimit.py on a real StateStore: it
needs 8 (at least 2) spread runs with baselines, minutes of cluster time here."""

from __future__ import annotations

import pytest

from slurm_plugin.controller.packlimit import placement_history
from slurm_plugin.controller.state import StateStore
from tests.helpers import poll
from tests.slurm.controller_support import (
    submit_sleep,
)
from tests.slurm.test_wrapper_resume import submitted, train_job, tsbatch

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def _runs(ctl):
    store = StateStore(ctl.tmp / "state.db", readonly_copy=True)
    try:
        return store.runs()
    finally:
        store.close()


def test_a_consolidated_and_a_spread_run_of_one_model_are_stored(cluster, make_controller, tmp_path):
    ctl = make_controller(placement="spread", policy={"queues": [100000]}).start()
    env = {"TRAIN_STEP_SLEEP": "0.05", "TRAIN_EPOCHS": "1", "OMP_NUM_THREADS": "1"}

    def train(tag: str) -> int:
        d = tmp_path / tag
        d.mkdir()
        return submitted(
            tsbatch(
                cluster,
                f"--checkpoint-dir={tmp_path / 'ckpt'}",
                "--no-profile",
                "-J",
                "m",
                "-p",
                "gpu",
                "--gpus=4",
                "-t",
                "5",
                f"--output={d / 'job.out'}",
                str(train_job(d, "train_plain.py", d / "out.pt")),
                env=env,
            )
        )

    # Alone on the cluster: one node (spread placement takes one node when one fits).
    first = train("first")
    cluster.wait_for(first, "COMPLETED", timeout=90)
    poll("the first run stored", lambda: len(_runs(ctl)) == 1, 30)
    # Every node 3 of 4 GPUs busy: the same model can only run on all four nodes.
    fillers = [submit_sleep(cluster, 3) for _ in cluster.nodes]
    for f in fillers:
        cluster.wait_for(f, "RUNNING", timeout=30)
    second = train("second")
    cluster.wait_for(second, "COMPLETED", timeout=90)
    runs = poll("the second run stored", lambda: len(r := _runs(ctl)) == 2 and r, 30)
    assert [(r.job_id, r.restart_count, r.model, r.gpus, r.nodes, r.min_nodes, r.consolidated) for r in runs] == [
        (first, 0, "m", 4, 1, 1, True),
        (second, 0, "m", 4, 4, 1, False),
    ]
    assert all(0.05 <= r.median_step_s < 2.0 and r.steps > 0 for r in runs)
    assert runs[0].skew is None  # --no-profile: it waits for a skew before it teaches the classifier
    assert placement_history(runs) == []
    assert f"[job {second}] run 0:" in ctl.logtext()
