"""Gandiva's time-slicing live (docs/gandiva.md): the real controller, policy
``gandiva``, real ``tsbatch`` PyTorch jobs on the real local Slurm.

The cluster is its own (DIR-gandiva, PORT_BASE+15, 1 node x 1 fake GPU x 2
shards, etc/job_submit.lua holding jobs at submission). Two ``--gres=shard:1``
jobs: the first starts alone; the second is colocated on its GPU and
time-sliced with it (``scontrol suspend/resume`` every 3 s slice). Both make
progress in alternating slices, park at mini-batch boundaries (the hooks'
slices.jsonl), and finish with the weights of the uninterrupted run, bit for bit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from slurm_plugin.localcluster import CLUSTER_NAME
from teiresias import jobfiles
from tests.helpers import poll
from tests.slurm.conftest import own_cluster, own_cluster_config, tsbatch_submit
from tests.slurm.controller_support import LUA, TEIRESIAS, ControllerProc
from tests.torch.jobs import SCRIPTS, job_env, steps_in

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

PY = sys.executable
SLICE_S = 3.0


@pytest.fixture(scope="module")
def gandiva_cluster():
    cfg = own_cluster_config(
        "gandiva", 15, nodes=1, gpus_per_node=1, shards_per_gpu=2, partitions=("gpu",), job_submit_lua=LUA
    )
    with own_cluster(cfg) as cluster:
        yield cluster


def test_two_jobs_time_sliced_on_one_gpu_alternate_and_finish_bitwise(gandiva_cluster, tmp_path, reference):
    base = tmp_path / "ckpt"
    batch = tmp_path / "slice.sh"
    # 36 steps of train_plain.py (the reference's), 0.4 s each: about 15 s of training per job.
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n#SBATCH -p gpu\n#SBATCH -t 10\n"
        f"cd {tmp_path}\nexport TRAIN_STEP_SLEEP=0.4\n"
        f"{PY} {SCRIPTS / 'train_plain.py'} out.$SLURM_JOB_ID.pt\n"
    )
    c = gandiva_cluster
    ctl = ControllerProc(
        tmp_path,
        c,
        policy={
            "name": "gandiva",
            "gandiva": {"slice": SLICE_S, "packing": False, "migration": False, "grow_shrink": False},
        },
    ).start()
    try:
        first = tsbatch_submit(c, f"--checkpoint-dir={base}", f"--output={tmp_path}/a.out", str(batch))
        c.wait_for(first, "RUNNING", timeout=60)
        poll("the first job training", lambda: len(steps_in(tmp_path / "a.out")) >= 2, timeout=60)
        second = tsbatch_submit(c, f"--checkpoint-dir={base}", f"--output={tmp_path}/b.out", str(batch))
        c.wait_for(second, "RUNNING", timeout=60)
        # The newcomer runs first (§4.1 early feedback); the first job waits suspended on its GPU.
        c.wait_for(first, "SUSPENDED", timeout=30)

        def queue_rows() -> dict | None:
            q = subprocess.run(
                [*TEIRESIAS, "queue", "-c", str(ctl.config), "--json"], capture_output=True, text=True, env=c.env
            )
            assert q.returncode == 0, q.stderr
            rows = {x["job_id"]: x for x in json.loads(q.stdout)}
            return rows if rows.get(first, {}).get("slices", 0) >= 1 else None

        rows = poll("the slices in `teiresias queue --json`", queue_rows, timeout=30, every=1)
        assert rows[first]["shared_with"] == second and rows[second]["shared_with"] == first  # type: ignore[index]
        assert rows[first]["migrations"] == 0  # type: ignore[index]
        for job in (first, second):
            c.wait_for(job, "COMPLETED", timeout=150)
    finally:
        ctl.stop()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    # Both trained exactly the uninterrupted run.
    for job in (first, second):
        got, want = torch.load(tmp_path / f"out.{job}.pt", weights_only=True), torch.load(reference, weights_only=True)
        assert all(torch.equal(got[k], want[k]) for k in want)
    # Alternating slices: the suspensions switch between the two jobs, and each job's
    # hooks parked it at a mini-batch boundary at least once and made steps between.
    order = [e["job"] for e in ctl.audit(action="suspend")]
    assert first in order and second in order, order
    assert all(a != b for a, b in zip(order, order[1:])), f"suspensions do not alternate: {order}"
    assert len(ctl.audit(action="resume")) >= 2
    for job in (first, second):
        slices = jobfiles.read_slices(jobfiles.job_dir(base, job, CLUSTER_NAME))
        assert slices and all(s.parked > 0 for s in slices), slices
        steps = [s.step for s in slices]
        assert steps == sorted(steps) and len(set(steps)) == len(steps), f"no progress between slices: {steps}"


@pytest.fixture(scope="module")
def spread_cluster():
    cfg = own_cluster_config("gandiva3", 5, nodes=3, gpus_per_node=2, partitions=("gpu", "other"), job_submit_lua=LUA)
    with own_cluster(cfg) as cluster:
        yield cluster


def test_a_spread_job_is_migrated_onto_one_node_when_gpus_free_up(spread_cluster, tmp_path, reference):
    """3 nodes x 2 GPUs. Jobs of the unmanaged partition hold node1:1, node2:1 and node3:2, so
    the 2-GPU job can only run spread (node1 + node2). Gandiva never starts a job spread
    (Algorithm 1 waits for a node), so it is started the way a job escapes any scheduler:
    submitted held by its user (``-H``, the user's hold, not the controller's) and released
    by the user; Slurm runs it spread and the controller manages it from then on. When
    node3's job ends, the gandiva policy consolidates it (§4.2.2, Figure 8): checkpoint,
    requeue held, start on node3, resume; it finishes with the uninterrupted run's
    weights, bit for bit."""
    c = spread_cluster
    c.clean()
    blockers = {
        n: c.submit("sleep 600", "-p", "other", f"--gres=gpu:{g}", "-w", n, "-c", "1", "-t", "10")
        for n, g in (("node1", 1), ("node2", 1), ("node3", 2))
    }
    for job in blockers.values():
        c.wait_for(job, "RUNNING", timeout=30)
    base = tmp_path / "ckpt"
    batch = tmp_path / "spread.sh"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH -G 2\n#SBATCH -p gpu\n#SBATCH -t 10\n"
        f"cd {tmp_path}\nexport TRAIN_STEP_SLEEP=0.3\n"
        f"{PY} {SCRIPTS / 'train_plain.py'} out.$SLURM_JOB_ID.pt\n"
    )
    job = tsbatch_submit(c, "-H", f"--checkpoint-dir={base}", f"--output={tmp_path}/s.out", str(batch))
    c.backend.release(job)
    running = c.wait_for(job, "RUNNING", timeout=60)
    assert sorted(running.nodes) == ["node1", "node2"]
    ctl = ControllerProc(
        tmp_path,
        c,
        policy={
            "name": "gandiva",
            "gandiva": {"max_height": 1, "packing": False, "migration": True, "grow_shrink": False},
        },
    ).start()
    try:
        poll("the spread job training", lambda: len(steps_in(tmp_path / "s.out")) >= 3, timeout=60)
        c.backend.cancel(blockers["node3"])
        moved = c.wait_for(job, "RUNNING", timeout=90, where=lambda j: j.restart_count >= 1)
        assert moved.nodes == ("node3",)
        c.wait_for(job, "COMPLETED", timeout=120)
        (mig,) = ctl.audit(job, "migrate")
        assert mig["to"] == ["node3"] and mig["gpus"] == 2 and "consolidates" in mig["reason"]
        rows = json.loads(
            subprocess.run(
                [*TEIRESIAS, "queue", "-c", str(ctl.config), "--json", "--all"],
                capture_output=True,
                text=True,
                env=c.env,
                check=True,
            ).stdout
        )
        assert next(r for r in rows if r["job_id"] == job)["migrations"] == 1
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    got, want = torch.load(tmp_path / f"out.{job}.pt", weights_only=True), torch.load(reference, weights_only=True)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert "resumed from" in (tmp_path / "s.out").read_text()


@pytest.fixture(scope="module")
def elastic_cluster():
    cfg = own_cluster_config("gandiva-el", 17, nodes=1, gpus_per_node=2, partitions=("gpu",), job_submit_lua=LUA)
    with own_cluster(cfg) as cluster:
        yield cluster


def _losses(text: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for line in text.splitlines():
        if line.startswith("step ") and " loss " in line:
            _, k, _, loss = line.split()
            if int(k) > 0:  # at 1 rank the first loader batch of a step prints before any step
                out[int(k)] = float(loss)
    return out


def test_an_elastic_job_grows_onto_an_idle_gpu_and_shrinks_for_a_waiting_job(elastic_cluster, tmp_path):
    """1 node x 2 GPUs. ``tsbatch --elastic 1-2 --gres=gpu:1`` (torchrun, one rank per GPU of
    its allocation) starts on 1 GPU; the other GPU sits idle 8 s, so the job is grown to 2
    (checkpoint, gres=gpu:2, restart at 2 ranks); a 1-GPU job then waits, so it is shrunk
    back to 1 at once. Its loss after every optimizer step matches the fixed 2-rank run
    (the hooks keep the global batch: 2 loader batches per step at 1 rank)."""
    c = elastic_cluster
    c.clean()
    r = subprocess.run(
        [
            PY,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SCRIPTS / "train_elastic.py"),
            str(tmp_path / "fixed.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=job_env(tmp_path / "fixed-jobs", 1, TEIRESIAS_ELASTIC="1-2"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    want = _losses(r.stdout)
    assert sorted(want) == list(range(1, 25))
    base = tmp_path / "ckpt"
    batch = tmp_path / "elastic.sh"
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 2\n#SBATCH --gres=gpu:1\n#SBATCH -p gpu\n#SBATCH -t 10\n#SBATCH --open-mode=append\n"
        f"cd {tmp_path}\nexport TRAIN_STEP_SLEEP=0.3 OMP_NUM_THREADS=1\n"
        'echo "run $SLURM_RESTART_COUNT on $SLURM_GPUS_ON_NODE GPU(s)"\n'
        f"{PY} -m torch.distributed.run --standalone --nproc-per-node=$SLURM_GPUS_ON_NODE "
        f"{SCRIPTS / 'train_elastic.py'} out.$SLURM_JOB_ID.pt\n"
    )
    ctl = ControllerProc(
        tmp_path,
        c,
        policy={
            "name": "gandiva",
            "gandiva": {"max_height": 1, "packing": False, "migration": False, "grow_shrink": True, "idle_period": 8},
        },
    ).start()
    waiter = None
    try:
        job = tsbatch_submit(c, "--elastic=1-2", f"--checkpoint-dir={base}", f"--output={tmp_path}/e.out", str(batch))
        out = tmp_path / "e.out"

        def grown_and_training() -> bool:
            text = out.read_text() if out.exists() else ""
            return "run 1 on 2 GPU(s)" in text and len(_losses(text.split("run 1 on", 1)[1])) >= 2

        poll("the job grown to 2 GPUs and training", grown_and_training, timeout=150, every=0.5)
        waiter = c.submit("sleep 600", "-p", "gpu", "--gres=gpu:1", "-c", "1", "-t", "10")
        c.wait_for(waiter, "RUNNING", timeout=90)
        c.wait_for(job, "COMPLETED", timeout=180)
        grow, shrink = ctl.audit(job, "grow"), ctl.audit(job, "shrink")
        assert [(e["from_gpus"], e["gpus"]) for e in grow] == [(1, 2)], grow
        assert [(e["from_gpus"], e["gpus"]) for e in shrink] == [(2, 1)], shrink
        assert grow[0]["time"] < shrink[0]["time"]
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    text = (tmp_path / "e.out").read_text()
    assert "run 2 on 1 GPU(s)" in text, text[-2000:]
    runs = text.split("run ")
    # The 2-rank run and the 1-rank run after it really trained (the first run may have
    # been grown before its first step when torch took more than the idle period to load).
    assert all(_losses(part) for part in runs[2:4]), text[-3000:]
    got = _losses(text)
    assert sorted(got) == list(range(1, 25))
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), f"loss after step {k}"


def test_a_packed_pair_is_unpacked_when_its_measured_throughput_drops(gandiva_cluster, tmp_path, reference):
    """Two time-sliced jobs on one GPU are packed because their measured utilisation is low
    (no NVML here: the hooks' step timing says each spends about a third of a step outside
    its slow DataLoader, so the two add up to less than 100%; Gandiva §4.2.2), measured
    packed, and unpacked because
    their packed throughput (sum of solo / packed mini-batch time, from the hooks'
    runs.jsonl) is below time-slicing's 1. The GPU they share is emulated: a job pays a
    context switch whenever the other used the GPU last (train_shared_device.py, a test
    double for GPU interference, which needs a GPU to happen for real). Both finish with
    the uninterrupted run's weights, bit for bit."""
    c = gandiva_cluster
    c.clean()
    base = tmp_path / "ckpt"
    batch = tmp_path / "pack.sh"
    # --checkpoint-every=1: the hooks write a step count to runs.jsonl at every checkpoint,
    # so the controller sees mini-batch times within a 3 s slice even on a busy machine.
    batch.write_text(
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n#SBATCH -p gpu\n#SBATCH -t 10\n"
        f"cd {tmp_path}\nexport TRAIN_STEP_SLEEP=0.05 TRAIN_LOAD_SLEEP=0.4 TRAIN_DEVICE_DIR={tmp_path}"
        " TRAIN_DEVICE_SWITCH=1.0\n"
        f"{PY} {SCRIPTS / 'train_shared_device.py'} out.$SLURM_JOB_ID.pt\n"
    )
    ctl = ControllerProc(
        tmp_path,
        c,
        policy={
            "name": "gandiva",
            "gandiva": {"slice": SLICE_S, "packing": True, "migration": False, "grow_shrink": False},
        },
    ).start()
    try:
        args = ("--checkpoint-every=1", f"--checkpoint-dir={base}")
        first = tsbatch_submit(c, *args, f"--output={tmp_path}/a.out", str(batch))
        c.wait_for(first, "RUNNING", timeout=60)
        poll("the first job training", lambda: len(steps_in(tmp_path / "a.out")) >= 2, timeout=60)
        second = tsbatch_submit(c, *args, f"--output={tmp_path}/b.out", str(batch))
        poll("the pair unpacked", lambda: ctl.audit(action="unpack"), timeout=120, every=1)
        for job in (first, second):
            c.wait_for(job, "COMPLETED", timeout=150)
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    packs, unpacks = ctl.audit(action="pack"), ctl.audit(action="unpack")
    assert sorted(e["job"] for e in packs) == [first, second], packs
    assert sorted(e["job"] for e in unpacks) == [first, second], unpacks
    assert max(e["time"] for e in packs) < min(e["time"] for e in unpacks)
    tput = float(re.search(r"packed throughput ([\d.]+) < 1\.00", unpacks[0]["reason"]).group(1))  # type: ignore[union-attr]
    assert tput < 1.0
    assert re.search(r"utilisation \d+%, the lowest waiting", packs[0]["reason"]), packs[0]["reason"]
    # Back to time-slicing after the unpack, and never packed again (pack_failed_with).
    last_unpack = max(e["time"] for e in unpacks)
    assert any(e["time"] > last_unpack for e in ctl.audit(action="suspend")), "no slicing after the unpack"
    for job in (first, second):
        got, want = torch.load(tmp_path / f"out.{job}.pt", weights_only=True), torch.load(reference, weights_only=True)
        assert all(torch.equal(got[k], want[k]) for k in want)
