"""GPU truth, live: a real PyTorch job submitted with tsbatch samples its own
usage (wrappers/hooks/usage.py) and the controller shows it in `teiresias queue`.

This machine has no GPU driver: NVML is absent for real, so the GPU columns
must say "n/a" (and why, in --json), while the CPU and memory of the job's
process tree are real figures. The figures NVML would give are unit-tested
with a stand-in (tests/torch/test_hooks_usage.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurm_plugin.localcluster import CLUSTER_NAME
from tests.helpers import poll
from tests.slurm.controller_support import REPO, TEIRESIAS
from tests.slurm.test_wrapper_resume import submitted, train_job, tsbatch
from tests.torch.jobs import last_step
from wrappers import protocol
from wrappers.protocol import read_usage

pytestmark = [pytest.mark.slurm, pytest.mark.torch]


def _queue(ctl, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TEIRESIAS, "queue", "-c", str(ctl.config), *args],
        capture_output=True,
        text=True,
        env=ctl.cluster.env,
        cwd=REPO,
        timeout=60,
    )


def test_a_running_tsbatch_job_shows_its_measured_usage_and_na_for_gpus_without_nvml(
    cluster, make_controller, tmp_path
):
    ctl = make_controller().start()
    out, log = tmp_path / "out.pt", tmp_path / "job.out"
    base = tmp_path / "ckpt"
    job = submitted(
        tsbatch(
            cluster,
            f"--checkpoint-dir={base}",
            "-p",
            "gpu",
            "--gpus=2",
            "-t",
            "10",
            f"--output={log}",
            str(train_job(tmp_path, "train_plain.py", out)),
            env={
                "TRAIN_EPOCHS": "200",
                "TRAIN_STEP_SLEEP": "0.02",
                "OMP_NUM_THREADS": "1",
                "TEIRESIAS_USAGE_EVERY": "1",
            },
        )
    )
    cluster.wait_for(job, "RUNNING", timeout=60)
    poll("training under way", lambda: last_step(log) >= 3, 120)

    # The job's own sample: its Slurm node, its 2 GPUs (SLURM_JOB_GPUS), NVML absent here.
    # In its job directory, <base>/<ClusterName>/<job> since the control channel (issue 21).
    (s,) = poll("a usage sample in the job dir", lambda: read_usage(protocol.job_dir(base, job, CLUSTER_NAME)), 30)
    assert s.job_id == job and s.gpus == 2 and s.node in cluster.nodes
    assert s.gpu_util is None and s.gpu_note.startswith("NVML unavailable")

    def row():
        r = _queue(ctl, "--json", "-j", str(job))
        assert r.returncode == 0, r.stderr
        (found,) = json.loads(r.stdout)
        return found if found["usage_time"] is not None and found["cpu_percent"] > 0 else None

    found = poll("the controller's view of its usage", row, 60)
    assert (found["gpu_util"], found["gpu_mem_used"], found["gpu_mem_total"]) == (None, None, None)
    assert found["usage_note"].startswith(f"{s.node}: NVML unavailable")
    assert found["rss_bytes"] > 100 * 2**20  # python + torch, measured
    assert 0 < found["cpu_percent"] < 400

    table = _queue(ctl, "-j", str(job))
    assert table.returncode == 0, table.stderr
    head, line = table.stdout.splitlines()
    col = head.split().index("GPU_UTIL")
    assert head.split()[col + 1] == "GPU_MEM"
    assert line.split()[col : col + 2] == ["n/a", "n/a"]

    cluster.backend.cancel(job)
    poll("usage cleared once the job no longer runs", lambda: ctl.rec(job).usage_time is None, 30)
