"""GPU sharing on multi-GPU nodes, live (docs/gandiva.md "Which GPU a shard job gets"):
each shard job runs on the GPU the plan chose, read back from ``scontrol -d show job``.

The cluster is its own (DIR-gpus4, PORT_BASE+30 .. +32, 2 nodes x 4 fake GPUs x 4
shards, per-GPU gres types, etc/job_submit.lua holding jobs at submission).
Jobs are plain ``sbatch --gres=shard:N`` sleeps: what is checked is where Slurm
puts them, not training (tests/slurm/test_sharing_live.py and
test_gandiva_live.py train real PyTorch jobs).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.helpers import poll
from tests.slurm.conftest import own_cluster, own_cluster_config
from tests.slurm.controller_support import LUA, TEIRESIAS, ControllerProc

pytestmark = [pytest.mark.slurm]

_GRES = re.compile(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)")
_IDX = re.compile(r"\(IDX:([^)]*)\)")


def gpu_index(cluster, job: int) -> tuple[str, tuple[int, ...]] | None:
    """(node, GPU indices) of a running job as ``scontrol -d show job`` prints them."""
    out = subprocess.run(
        ["scontrol", "-d", "show", "job", str(job)], capture_output=True, text=True, env=cluster.env
    ).stdout
    m = _GRES.search(out)
    if m is None:
        return None
    ids: set[int] = set()
    for spec in _IDX.findall(m.group(2)):
        for part in spec.split(","):
            if part.strip() and part.strip() != "N/A":
                lo, _, hi = part.partition("-")
                ids.update(range(int(lo), int(hi or lo) + 1))
    return m.group(1), tuple(sorted(ids))


def submit(cluster, shards: int, seconds: int = 600) -> int:
    return cluster.submit(f"sleep {seconds}", "-p", "gpu", "-c", "1", f"--gres=shard:{shards}")


def queue_rows(ctl: ControllerProc) -> dict[int, dict]:
    q = subprocess.run(
        [*TEIRESIAS, "queue", "-c", str(ctl.config), "--json"], capture_output=True, text=True, env=ctl.cluster.env
    )
    assert q.returncode == 0, q.stderr
    return {x["job_id"]: x for x in json.loads(q.stdout)}


@pytest.fixture(scope="module")
def gpus4():
    cfg = own_cluster_config(
        "gpus4", 30, nodes=2, gpus_per_node=4, shards_per_gpu=4, partitions=("gpu",), job_submit_lua=LUA
    )
    with own_cluster(cfg) as cluster:
        yield cluster


SHARING_YAML = """\
gpu_memory_gb: 100    # every sub-batch fits: a guest keeps its full batch (no accumulate.json)
default: {batch: 16, memory_gb: 6.0, interference: 1.2}
"""


def test_sjf_bsbf_jobs_alone_get_their_own_gpu_and_a_guest_its_hosts(gpus4, tmp_path) -> None:
    """The issue's case: `--gres=shard:2` jobs started alone all ran on IDX 0 while the
    controller believed each had its own GPU. Now: four jobs on one 4-GPU node (the
    plan fills node1 first) each on a GPU of its own, and a fifth, the guest, on its
    host's GPU; `queue --json` says who shares."""
    c = gpus4
    samples, model = tmp_path / "gput.csv", tmp_path / "sharing.yaml"
    samples.write_text("duration\n" + "600\n" * 20)
    model.write_text(SHARING_YAML)
    ctl = ControllerProc(
        tmp_path, c, policy={"name": "sjf-bsbf", "gittins_samples": str(samples), "sharing": str(model)}
    ).start()
    try:
        alone = []
        for _ in range(8):
            alone.append(submit(c, 2))
        for j in alone:
            c.wait_for(j, "RUNNING", timeout=90)
        where = {j: poll(f"job {j}'s GPU", lambda j=j: gpu_index(c, j), timeout=30) for j in alone}
        per_gpu = {(n, ids) for n, ids in where.values()}
        assert len(per_gpu) == 8, where  # eight jobs, eight GPUs: nobody shares
        assert all(len(ids) == 1 for _, ids in where.values()), where
        guest = submit(c, 2)
        c.wait_for(guest, "RUNNING", timeout=90)
        rows = poll(
            "the pair in `teiresias queue --json`",
            lambda: r if (r := queue_rows(ctl)).get(guest, {}).get("shared_with") else None,
            timeout=30,
            every=1,
        )
        host = rows[guest]["shared_with"]
        assert host in alone and rows[host]["shared_with"] == guest
        assert gpu_index(c, guest) == where[host]  # on its host's GPU, by name
        others = [j for j in alone if j != host]
        assert all(rows[j]["shared_with"] is None for j in others)
        (share,) = ctl.audit(guest, "share")
        assert share["partner"] == host
        (start,) = [e for e in ctl.audit(guest, "start")]
        assert start["gpu_ids"] == [list(where[host][1])]
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
