"""GPU sharing on the real local Slurm through gres/shard, with the hooks' gradient accumulation.

The cluster is its own (DIR-shards, PORT_BASE+10 .., 1 node x 1 fake GPU x 2
shards, ``ClusterConfig.shards_per_gpu``): two ``tsbatch`` jobs asking
``--gres=shard:1`` run at the same time on the one GPU, each with
``accumulate.json`` (4 micro-batches) in its job directory; both finish with
the weights of full-batch training. A ``--gres=gpu:1`` job waits while the
shard jobs hold the GPU (the ``Cores=`` on the gpu line, notes §3).

What this does not show yet: the controller choosing the pair
(docs/sjf-bsbf.md §8); here the test plays the controller's part.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slurm_plugin.localcluster import ClusterConfig, LocalCluster
from slurm_plugin.localcluster.config import render_gres_conf, render_slurm_conf
from tests.helpers import poll
from tests.slurm.conftest import SlurmTestCluster, test_cluster_config
from tests.torch.jobs import SCRIPTS, plain_env, run
from wrappers import protocol

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

TSBATCH = str(Path(sys.executable).with_name("tsbatch"))
PY = sys.executable


def shard_config() -> ClusterConfig:
    base = test_cluster_config()
    return ClusterConfig(dir=Path(f"{base.dir}-shards"), nodes=1, gpus_per_node=1, shards_per_gpu=2,
                         port_base=base.port_base + 10, partitions=("gpu",))


def test_shards_are_opt_in_and_change_nothing_by_default() -> None:
    d = Path("/var/tmp/c")  # never started: only rendered
    plain = ClusterConfig(dir=d, nodes=2, gpus_per_node=4, port_base=21000)
    assert "shard" not in render_slurm_conf(plain) + render_gres_conf(plain)
    assert "Cores=" not in render_gres_conf(plain)
    shared = ClusterConfig(dir=d, nodes=2, gpus_per_node=4, port_base=21000, shards_per_gpu=2)
    conf = render_slurm_conf(shared)
    assert "GresTypes=gpu,shard" in conf and "Gres=gpu:4,shard:8 " in conf
    assert "SelectType=select/cons_tres" in conf  # shared gres needs cons_tres (fatal otherwise)
    assert render_gres_conf(shared).rstrip().endswith("Cores=0-7")


@pytest.fixture(scope="module")
def shard_cluster():
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd runs as root, fake GPUs need mknod)")
    cluster = LocalCluster(shard_config())
    cluster.up()
    try:
        yield SlurmTestCluster(cluster)
    finally:
        if os.environ.get("TEIRESIAS_TEST_CLUSTER_KEEP") != "1":
            cluster.down()


def _submit(cluster: SlurmTestCluster, *args: str) -> int:
    r = subprocess.run([TSBATCH, *args], env={**cluster.env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout)
    assert m, r.stdout
    return int(m.group(1))


def test_two_tsbatch_jobs_share_one_gpu_with_accumulation(shard_cluster, tmp_path) -> None:
    ref = tmp_path / "ref.pt"
    r = run("train_accumulate.py", [str(ref)], plain_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    base, release = tmp_path / "ckpt", tmp_path / "release"
    batch = tmp_path / "share.sh"
    # The job waits for the test's go after training, so both are seen running together.
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n"
        f"cd {tmp_path}\n"
        f"echo \"$CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE\" > env.$SLURM_JOB_ID\n"
        f"{PY} {SCRIPTS / 'train_accumulate.py'} out.$SLURM_JOB_ID.pt || exit 1\n"
        f"while [ ! -e {release} ]; do sleep 0.2; done\n"
    )
    jobs = []
    for k in range(2):
        # Held at submission, like the controller's jobs; the controller would write
        # accumulate.json before releasing a guest (Plan.sharing's accumulation).
        job = _submit(shard_cluster, "-H", f"--checkpoint-dir={base}", f"--output={tmp_path}/job{k}.out",
                      str(batch))
        jd = protocol.job_dir(base, job)
        jd.mkdir(parents=True, mode=0o700)
        protocol.write_accumulate(jd, protocol.Accumulate(4, 4))
        jobs.append(job)
    for job in jobs:
        shard_cluster.backend.release(job)
    for job in jobs:
        shard_cluster.wait_for(job, "RUNNING", timeout=60)
    envs = poll("both jobs trained", lambda: all((tmp_path / f"out.{j}.pt").exists() for j in jobs)
                and [(tmp_path / f"env.{j}").read_text().split() for j in jobs], timeout=180)
    assert envs == [["0", "1"], ["0", "1"]]  # the same (only) GPU, one shard each
    assert all(shard_cluster.job(j).state == "RUNNING" for j in jobs), "both hold the GPU at once"
    # A whole-GPU job cannot take the GPU the two shard jobs are on.
    gpu_job = shard_cluster.submit("true", "--gres=gpu:1", "-c", "1")
    pending = shard_cluster.wait_for(gpu_job, "PENDING", timeout=30, where=lambda j: j.state_reason == "Resources")
    assert pending.state_reason == "Resources"
    release.touch()
    for job in jobs + [gpu_job]:
        shard_cluster.wait_for(job, "COMPLETED", timeout=120)
    want = torch.load(ref, weights_only=True)
    for k, job in enumerate(jobs):
        log = (tmp_path / f"job{k}.out").read_text()
        sizes = {int(line.split()[1]) for line in log.splitlines() if line.startswith("batch ")}
        assert sizes == {4}, log[-2000:]  # micro-batches of 16 / 4
        got = torch.load(tmp_path / f"out.{job}.pt", weights_only=True)
        assert all(torch.allclose(want[n], got[n], rtol=0, atol=1e-10) for n in want)
