"""GPU sharing on the real local Slurm through gres/shard, with the hooks' gradient accumulation.

The cluster is its own (DIR-shards, PORT_BASE+10 .., 1 node x 1 fake GPU x 2
shards, ``ClusterConfig.shards_per_gpu``): two ``tsbatch`` jobs asking
``--gres=shard:1`` run at the same time on the one GPU, each with
``accumulate.json`` (4 micro-batches) in its job directory; both finish with
the weights of full-batch training. A ``--gres=gpu:1`` job waits while the
shard jobs hold the GPU (the ``Cores=`` on the gpu line, notes §3).

In the first test the test plays the controller's part; in
``test_controller_shares_a_gpu_with_accumulation`` the real controller (a
``teiresias controller run`` process, policy sjf-bsbf, etc/job_submit.lua
holding jobs at submission) decides the pair, writes the guest's
accumulate.json and starts it on its host's GPU (docs/sjf-bsbf.md §9).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from slurm_plugin.localcluster import CLUSTER_NAME, ClusterConfig
from slurm_plugin.localcluster.config import render_gres_conf, render_slurm_conf
from tests.helpers import poll
from tests.slurm.conftest import own_cluster, own_cluster_config, tsbatch_submit
from tests.slurm.controller_support import LUA, TEIRESIAS, ControllerProc, tie_files
from tests.torch.jobs import SCRIPTS, plain_env, run
from wrappers import protocol

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

PY = sys.executable


def test_shards_are_opt_in_and_change_nothing_by_default() -> None:
    d = Path("/var/tmp/c")  # never started: only rendered
    plain = ClusterConfig(dir=d, nodes=2, gpus_per_node=4, port_base=21000)
    assert "shard" not in render_slurm_conf(plain) + render_gres_conf(plain)
    assert "Cores=" not in render_gres_conf(plain)
    shared = ClusterConfig(dir=d, nodes=2, gpus_per_node=4, port_base=21000, shards_per_gpu=2)
    conf = render_slurm_conf(shared)
    assert "GresTypes=gpu,shard" in conf
    # One gres Type per GPU: the controller names the GPU a shard job gets (docs/gandiva.md).
    assert "Gres=gpu:g0:1,gpu:g1:1,gpu:g2:1,gpu:g3:1,shard:g0:2,shard:g1:2,shard:g2:2,shard:g3:2 " in conf
    assert "SelectType=select/cons_tres" in conf  # shared gres needs cons_tres (fatal otherwise)
    gres = render_gres_conf(shared)
    assert "Name=gpu Type=g3 File=/var/tmp/c/dev/nvidia3 Cores=0-7" in gres
    assert "Name=shard Type=g3 Count=2 File=/var/tmp/c/dev/nvidia3" in gres


@pytest.fixture(scope="module")
def shard_cluster():
    cfg = own_cluster_config("shards", 10, nodes=1, gpus_per_node=1, shards_per_gpu=2, partitions=("gpu",))
    with own_cluster(cfg) as cluster:
        yield cluster


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
        f'echo "$CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE" > env.$SLURM_JOB_ID\n'
        f"{PY} {SCRIPTS / 'train_accumulate.py'} out.$SLURM_JOB_ID.pt || exit 1\n"
        f"while [ ! -e {release} ]; do sleep 0.2; done\n"
    )
    jobs = []
    for k in range(2):
        # Held at submission, like the controller's jobs; the controller would write
        # accumulate.json before releasing a guest (Plan.sharing's accumulation).
        job = tsbatch_submit(
            shard_cluster, "-H", f"--checkpoint-dir={base}", f"--output={tmp_path}/job{k}.out", str(batch)
        )
        jd = protocol.job_dir(base, job, CLUSTER_NAME)
        jd.mkdir(parents=True, mode=0o700)
        # as the controller makes it (controller/channel.py): with the job's key, which the
        # batch shell checks (a folder with another key is an earlier job's and set aside)
        key = protocol.parse_comment(shard_cluster.job(job).comment)["key"]
        (jd / protocol.KEY_FILE).write_text(key + "\n")
        protocol.write_accumulate(jd, protocol.Accumulate(4, 4))
        jobs.append(job)
    for job in jobs:
        shard_cluster.backend.release(job)
    for job in jobs:
        shard_cluster.wait_for(job, "RUNNING", timeout=60)
    envs = poll(
        "both jobs trained",
        lambda: (
            all((tmp_path / f"out.{j}.pt").exists() for j in jobs)
            and [(tmp_path / f"env.{j}").read_text().split() for j in jobs]
        ),
        timeout=180,
    )
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


def start_pair(c, ctl: ControllerProc, tmp_path: Path, base: Path, batch: Path) -> tuple[int, int, dict]:
    """Submit a host and, once it runs, a guest (tsbatch, ``batch``); the controller shares: both
    run at once. The two job ids and the guest's ``share`` audit line."""
    host = tsbatch_submit(c, f"--checkpoint-dir={base}", f"--output={tmp_path}/host.out", str(batch))
    c.wait_for(host, "RUNNING", timeout=60)
    guest = tsbatch_submit(c, f"--checkpoint-dir={base}", f"--output={tmp_path}/guest.out", str(batch))
    c.wait_for(guest, "RUNNING", timeout=60)
    assert c.job(host).state == "RUNNING", "both hold the one GPU at once"
    (share,) = ctl.audit(guest, "share")
    assert share["partner"] == host
    return host, guest, share


SHARING_YAML = """\
gpu_memory_gb: 9      # host at its full batch (6 GB) + guest: only sub-batch 4 fits (3 GB)
min_sub_batch: 4
default: {batch: 16, memory_gb: 6.0, fixed_memory_gb: 2.0, compute_fixed: 0.1, sync: 0.2, overlap: 2.0,
          interference: 1.2}
"""


def test_controller_shares_a_gpu_with_accumulation(shard_cluster, tmp_path) -> None:
    """sjf-bsbf decides to share: the guest gets accumulate.json (4 x 4) and the host's
    GPU; both run at once and end with the full-batch weights; the audit log has the
    pair decision with its numbers; `teiresias queue --json` shows the pair."""
    ref = tmp_path / "ref.pt"
    r = run("train_accumulate.py", [str(ref)], plain_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    samples, model = tmp_path / "gput.csv", tmp_path / "sharing.yaml"
    # Past jobs all took 600 GPU-s: each job's expected length; xi 1.2 makes sharing pay
    # (Theorem 1: pair average about 1.37 x 600 s shared, 1.5 x 600 s one after the other).
    samples.write_text("duration\n" + "600\n" * 20)
    model.write_text(SHARING_YAML)
    base, release = tmp_path / "ckpt", tmp_path / "release"
    batch = tmp_path / "share.sh"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n#SBATCH -p gpu\n#SBATCH -t 10\n"
        f"cd {tmp_path}\n"
        f'echo "$CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE" > env.$SLURM_JOB_ID\n'
        f"{PY} {SCRIPTS / 'train_accumulate.py'} out.$SLURM_JOB_ID.pt || exit 1\n"
        f"while [ ! -e {release} ]; do sleep 0.2; done\n"
    )
    with shard_cluster.reconfigured(job_submit_lua=LUA) as c:
        ctl = ControllerProc(
            tmp_path, c, policy={"name": "sjf-bsbf", "gittins_samples": str(samples), "sharing": str(model)}
        ).start()
        try:
            host, guest, share = start_pair(c, ctl, tmp_path, base, batch)
            assert (share["sub_batch"], share["accumulation"]) == (4, 4)
            assert (share["slowdown"], share["partner_slowdown"]) == (1.2, 1.2)
            assert 0 < share["shared_avg_jct"] < share["sequential_avg_jct"]
            assert share["alone_slowdown"] > 1
            assert protocol.read_accumulate(protocol.job_dir(base, guest, CLUSTER_NAME)) == protocol.Accumulate(4, 4)
            assert (
                protocol.read_accumulate(protocol.job_dir(base, host, CLUSTER_NAME)) is None
            )  # the host's batch is kept

            def queue_rows():
                q = subprocess.run(
                    [*TEIRESIAS, "queue", "-c", str(ctl.config), "--json"], capture_output=True, text=True, env=c.env
                )
                assert q.returncode == 0, q.stderr
                rows = {x["job_id"]: x for x in json.loads(q.stdout)}
                return rows if rows.get(guest, {}).get("shared_with") == host else None

            rows = poll("the pair in `teiresias queue --json`", queue_rows, timeout=30, every=1)
            assert {k: rows[guest][k] for k in ("shared_with", "sub_batch", "accumulation")} == {
                "shared_with": host,
                "sub_batch": 4,
                "accumulation": 4,
            }
            assert {k: rows[host][k] for k in ("shared_with", "sub_batch", "accumulation")} == {
                "shared_with": guest,
                "sub_batch": None,
                "accumulation": 1,
            }
            poll(
                "both jobs trained",
                lambda: all((tmp_path / f"out.{j}.pt").exists() for j in (host, guest)),
                timeout=240,
            )
            envs = [(tmp_path / f"env.{j}").read_text().split() for j in (host, guest)]
            assert envs == [["0", "1"], ["0", "1"]]  # the same (only) GPU, one shard each
            release.touch()
            for job in (host, guest):
                c.wait_for(job, "COMPLETED", timeout=120)
            poll(
                "the pair ended in the records",
                lambda: all((rc := ctl.rec(j)) is not None and rc.final_state == "COMPLETED" for j in (host, guest)),
                timeout=30,
            )
        finally:
            ctl.stop()
        assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    want = torch.load(ref, weights_only=True)
    for name, job, size in (("host", host, 16), ("guest", guest, 4)):
        log = (tmp_path / f"{name}.out").read_text()
        sizes = {int(line.split()[1]) for line in log.splitlines() if line.startswith("batch ")}
        assert sizes == {size}, log[-2000:]
        got = torch.load(tmp_path / f"out.{job}.pt", weights_only=True)
        assert all(torch.allclose(want[n], got[n], rtol=0, atol=1e-10) for n in want)


def test_two_fresh_jobs_share_where_theorem_1_ties(shard_cluster, tmp_path) -> None:
    """Issue 22 item 4, live: no durations, every past job took 600 GPU-s, so host and guest get the
    same length, and at the default xi 1.5 Theorem 1 ties (shared or one after the other, the
    pair's average is 900 s). b9c4356 kept the guest waiting ("would raise the pair's average JCT
    to 600 s from 600 s"); the tie now goes to sharing, which frees the GPU sooner. No sharing
    model: every sub-batch fits, the guest runs at its full batch (no accumulation)."""
    samples, base, release, batch = tie_files(tmp_path)
    with shard_cluster.reconfigured(job_submit_lua=LUA) as c:
        ctl = ControllerProc(tmp_path, c, policy={"name": "sjf-bsbf", "gittins_samples": str(samples)}).start()
        try:
            host, guest, share = start_pair(c, ctl, tmp_path, base, batch)
            assert share["accumulation"] == 1
            # The tie: one pair average either way; the queue check's two sums are equal too.
            assert share["shared_avg_jct"] == pytest.approx(share["sequential_avg_jct"], abs=0.01)
            assert share["queue_sum_jct"] == pytest.approx(share["queue_sum_jct_without"], abs=0.01)
            poll("both wrote their GPU", lambda: all((tmp_path / f"env.{j}").exists() for j in (host, guest)))
            assert [(tmp_path / f"env.{j}").read_text().split() for j in (host, guest)] == [["0"], ["0"]]
            release.touch()
            for job in (host, guest):
                c.wait_for(job, "COMPLETED", timeout=60)
        finally:
            ctl.stop()
        assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
