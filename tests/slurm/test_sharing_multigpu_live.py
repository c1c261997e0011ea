"""GPU sharing on multi-GPU nodes, live (docs/gandiva.md "Which GPU a shard job gets"):
each shard job runs on the GPU the plan chose, read back from ``scontrol -d show job``.

The cluster is its own (DIR-gpus4, PORT_BASE+30 .. +32, 2 nodes x 4 fake GPUs x 8
shards, per-GPU gres types, etc/job_submit.lua holding jobs at submission).
SJF-BSBF's jobs are plain ``sbatch --gres=shard:N`` sleeps (where Slurm puts them
is what is checked); Gandiva's are ``tsbatch`` PyTorch jobs, whose hooks park them
at mini-batch boundaries and switch GPUs when the controller says so
(tests/slurm/test_gandiva_live.py checks their training bit for bit).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_plugin.controller import channel
from teiresias import jobfiles
from tests.helpers import poll
from tests.slurm.conftest import own_cluster, own_cluster_config, tsbatch_submit
from tests.slurm.controller_support import LUA, TEIRESIAS, ControllerProc, tie_files
from tests.torch.jobs import SCRIPTS

pytestmark = [pytest.mark.slurm]

_GRES = re.compile(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)")
_IDX = re.compile(r"\(IDX:([^)]*)\)")


def gpu_index(cluster, job: int | str) -> tuple[str, tuple[int, ...]] | None:
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
        "gpus4", 30, nodes=2, gpus_per_node=4, shards_per_gpu=8, partitions=("gpu",), job_submit_lua=LUA
    )
    with own_cluster(cfg) as cluster:
        yield cluster


SHARING_YAML = """\
gpu_memory_gb: 100    # every sub-batch fits: a guest keeps its full batch (no accumulate.json)
default: {batch: 16, memory_gb: 6.0, interference: 1.2}
"""


def test_sjf_bsbf_jobs_alone_get_their_own_gpu_and_a_guest_its_hosts(gpus4, tmp_path) -> None:
    """The issue's case: `--gres=shard:N` jobs started alone all ran on IDX 0 while the
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
            alone.append(submit(c, 4))  # half a GPU's shards (docs/sjf-bsbf.md §9)
        for j in alone:
            c.wait_for(j, "RUNNING", timeout=90)
        where = {j: poll(f"job {j}'s GPU", lambda j=j: gpu_index(c, j), timeout=30) for j in alone}
        per_gpu = {(n, ids) for n, ids in where.values()}
        assert len(per_gpu) == 8, where  # eight jobs, eight GPUs: nobody shares
        assert all(len(ids) == 1 for _, ids in where.values()), where
        guest = submit(c, 4)
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


def test_two_fresh_jobs_share_where_theorem_1_ties_on_a_4gpu_node(gpus4, tmp_path) -> None:
    """test_sharing_live.py's tie (issue 22 item 4) on 4-GPU nodes with per-GPU shard types:
    two fresh tsbatch shard jobs, every past job 600 GPU-s, default xi 1.5. The host gets
    GPU 1 of its node (a whole-GPU job started before it holds GPU 0; whole-GPU jobs started
    after it fill the rest); the guest shares at once and lands on GPU 1 too, by name (IDX
    and CUDA_VISIBLE_DEVICES), never beside a job holding whole GPUs, which gives no shard
    (Job.shareable: before, the guest chose such a host and waited for ever). A whole-GPU
    job waiting ahead of it shares nothing and takes the first GPU to free in the queue
    check, so sharing still ties there."""
    c = gpus4
    c.clean()
    samples, base, release, batch = tie_files(tmp_path)
    ctl = ControllerProc(tmp_path, c, policy={"name": "sjf-bsbf", "gittins_samples": str(samples)}).start()

    def tsb(name: str) -> int:
        return tsbatch_submit(c, f"--checkpoint-dir={base}", f"--output={tmp_path}/{name}.out", str(batch))

    def whole() -> int:
        return c.submit("sleep 600", "-p", "gpu", "-c", "1", "--gres=gpu:1")

    try:
        first = whole()
        node = c.wait_for(first, "RUNNING", timeout=60).nodes[0]
        host = tsb("host")
        c.wait_for(host, "RUNNING", timeout=60)
        assert poll("the host's GPU", lambda: gpu_index(c, host), timeout=30) == (node, (1,))
        walls = [whole() for _ in range(6)]
        for w in walls:
            c.wait_for(w, "RUNNING", timeout=60)
        waits = whole()
        guest = tsb("guest")
        c.wait_for(guest, "RUNNING", timeout=60)
        (share,) = ctl.audit(guest, "share")
        assert share["partner"] == host and share["accumulation"] == 1
        assert share["shared_avg_jct"] == pytest.approx(share["sequential_avg_jct"], abs=0.01)
        assert share["queue_sum_jct"] == pytest.approx(share["queue_sum_jct_without"], abs=0.01)
        assert poll("the guest's GPU", lambda: gpu_index(c, guest), timeout=30) == (node, (1,))
        poll("both wrote their GPU", lambda: all((tmp_path / f"env.{j}").exists() for j in (host, guest)))
        assert [(tmp_path / f"env.{j}").read_text().split() for j in (host, guest)] == [["1"], ["1"]]
        assert c.job(waits).state == "PENDING"
        assert poll("the whole job's reason", lambda: (r := ctl.rec(waits)) and r.reason, timeout=15) == (
            "waits for 1 free GPU(s): it asks for whole GPUs, so it shares none"
        )
        release.touch()
        for job in (host, guest):
            c.wait_for(job, "COMPLETED", timeout=60)
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]


SLICE_S = 6.0


def control_folder(ctl: ControllerProc, job: int) -> Path | None:
    """The folder the controller and a job exchange files in (slurm_plugin/controller/channel.py):
    the job's records (devices.jsonl) are read from ``channel.folder``; without spool_dir, as
    here, the controller writes gpu.json to the same folder (``channel.folder_for_job``)."""
    rec = ctl.rec(job)
    return channel.folder(rec) if rec is not None else None


def test_a_shard_job_arrays_tasks_keep_their_request_when_split_off(gpus4, tmp_path) -> None:
    """job_submit.lua keeps an untyped shard request in the AdminComment
    (``teiresias:shard=N``) until the controller gives it the GPU's type. Splitting an
    array's tasks off (one ``admincomment=`` update each) wrote the mark alone and dropped
    the stash: each task lost its shard request. Every task now runs on one GPU by name."""
    c = gpus4
    ctl = ControllerProc(tmp_path, c).start()
    try:
        array = c.submit("sleep 600", "-p", "gpu", "-c", "1", "--gres=shard:2", "--array=0-1")
        tasks = [f"{array}_0", f"{array}_1"]
        where = {t: poll(f"task {t} on a GPU", lambda t=t: gpu_index(c, t), timeout=90) for t in tasks}
        assert all(len(ids) == 1 for _, ids in where.values()), where
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]


def _running_gpus(
    c, folders: dict[int, Path | None], jobs: list[int], floaters: set[int]
) -> dict[tuple[str, int], list[int]] | None:
    """(node, GPU) -> the jobs running there now, in the controller's plan: Slurm's IDX for a
    job bound to one GPU, gpu.json for a job bound to all its node's GPUs (None while some
    running job's GPU is not known yet)."""
    seen: dict[tuple[str, int], list[int]] = {}
    for sj in c.backend.jobs():
        if sj.job_id not in jobs or sj.state != "RUNNING" or not sj.nodes:
            continue
        if sj.job_id in floaters:
            jd = folders.get(sj.job_id)
            dev = jobfiles.read_device(jd) if jd is not None else None
            if dev is None:
                return None
            gpu = dev.gpu
        else:
            ids = sj.gpu_ids_on(sj.nodes[0])
            if len(ids) != 1:
                return None
            gpu = ids[0]
        seen.setdefault((sj.nodes[0], gpu), []).append(sj.job_id)
    return seen


def _watch(ctl: ControllerProc, jobs: list[int], floaters: set[int], seconds: float) -> int:
    """Sample who runs where for ``seconds``: no GPU may run two jobs (no packing here) for
    longer than a round takes to enact (a suspend and a resume are two Slurm calls).
    Returns the samples in which every running job's GPU was known (at least half of them:
    a watch that cannot read gpu.json would see nothing and pass)."""
    c = ctl.cluster
    folders = {f: poll(f"job {f}'s control folder", lambda f=f: control_folder(ctl, f), timeout=30) for f in floaters}
    bad_since: float | None = None
    samples = taken = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seen = _running_gpus(c, folders, jobs, floaters)
        taken += 1
        samples += seen is not None
        shared = {k: v for k, v in (seen or {}).items() if len(v) > 1}
        if shared:
            bad_since = bad_since or time.monotonic()
            assert time.monotonic() - bad_since < 3.0, f"GPUs run two jobs the plan did not pack: {shared}"
        else:
            bad_since = None
        time.sleep(0.5)
    assert samples >= taken / 2, f"the GPUs of running jobs were known in {samples} of {taken} samples"
    return samples


class GandivaRun:
    """The real controller under gandiva (slice SLICE_S, max height 2) on ``c``, and tsbatch
    shard:1 jobs running ``script`` with ``env`` (one line of exports)."""

    def __init__(self, c, tmp_path, script: str, env: str, *, packing: bool, migration: bool, every: int = 0) -> None:
        self.c, self.tmp = c, tmp_path
        self.base = tmp_path / "ckpt"
        self.batch = tmp_path / "t.sh"
        self.batch.write_text(
            "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --gres=shard:1\n#SBATCH -p gpu\n#SBATCH -t 20\n"
            f"cd {tmp_path}\nexport {env}\n{sys.executable} {SCRIPTS / script} out.$SLURM_JOB_ID.pt\n"
        )
        # --checkpoint-every=1: runs.jsonl gets the step count (and busy share) at every step.
        self.every = ("--checkpoint-every=1",) if every else ()
        params = {"slice": SLICE_S, "max_height": 2, "packing": packing, "migration": migration}
        self.ctl = ControllerProc(
            tmp_path, c, policy={"name": "gandiva", "gandiva": {**params, "grow_shrink": False}}
        ).start()

    def tsb(self, name: str) -> int:
        args = (*self.every, f"--checkpoint-dir={self.base}", f"--output={self.tmp}/{name}.out")
        return tsbatch_submit(self.c, *args, str(self.batch))

    def fill_a_node(self) -> tuple[str, list[int], dict[int, tuple[str, tuple[int, ...]]]]:
        """A whole-node gpu:4 job on one node, four shard jobs on the other: (the whole-node
        job's node, the four jobs, their (node, IDX))."""
        c = self.c
        wall = c.submit("sleep 600", "-p", "gpu", "-c", "1", "--gres=gpu:4")
        self.wall = wall
        other = c.wait_for(wall, "RUNNING", timeout=60).nodes[0]
        pinned = [self.tsb(f"p{k}") for k in range(4)]
        for j in pinned:
            c.wait_for(j, "RUNNING", timeout=120)
        where = {j: poll(f"job {j}'s GPU", lambda j=j: gpu_index(c, j), timeout=30) for j in pinned}
        return other, pinned, where  # type: ignore[return-value]


def test_gandiva_time_slices_1gpu_jobs_across_a_4gpu_node_and_migrates_by_index(gpus4, tmp_path) -> None:
    """Issue 22 items 1, 2, 9 live: four 1-GPU shard jobs on a 4-GPU node get GPUs 0-3;
    newcomers run within a slice, bound to all four GPUs, and rotate across them (six on
    four, then eight: twice as many jobs as GPUs), no GPU ever running two jobs; when the
    other node frees up, suspended jobs migrate there, each to its own GPU index."""
    c = gpus4
    c.clean()
    g = GandivaRun(
        c, tmp_path, "train_plain.py", "TRAIN_STEP_SLEEP=0.25 TRAIN_EPOCHS=200", packing=False, migration=True
    )
    ctl, tsb = g.ctl, g.tsb
    try:
        other, pinned, where = g.fill_a_node()
        wall = g.wall
        node = where[pinned[0]][0]  # type: ignore[index]
        assert node != other and set(where.values()) == {(node, (k,)) for k in range(4)}, where
        floaters: list[int] = []
        for k in range(2):
            t0 = time.monotonic()
            floaters.append(tsb(f"f{k}"))
            c.wait_for(floaters[-1], "RUNNING", timeout=60)
            assert time.monotonic() - t0 < SLICE_S + 30, "a newcomer waited longer than a slice (and its start)"
        for f in floaters:
            (start,) = ctl.audit(f, "start")
            assert start["bind"] == [0, 1, 2, 3] and len(start["gpu_ids"][0]) == 1
            assert c.job(f).gpu_ids == ((node, (0, 1, 2, 3)),)  # a shard of each GPU of its node
        jobs = pinned + floaters
        _watch(ctl, jobs, set(floaters), 5 * SLICE_S)
        # Six jobs on four GPUs: the newcomers moved across the node's GPUs (Figure 9).
        moved = ctl.audit(action="device")
        assert moved and {e["job"] for e in moved} <= set(floaters), moved
        assert any(len({e["gpu"] for e in moved if e["job"] == f}) >= 2 for f in floaters), moved
        poll(
            "a GPU switch seen by a job's hooks",
            lambda: any(
                len({r.gpu for r in jobfiles.read_devices(jd)}) >= 2
                for f in floaters
                if (jd := control_folder(ctl, f)) is not None
            ),
            timeout=60,
        )
        # Eight jobs on four GPUs (2x): newcomers still time-slice at once.
        for k in range(2, 4):
            floaters.append(tsb(f"f{k}"))
            c.wait_for(floaters[-1], "RUNNING", timeout=60)
        jobs = pinned + floaters
        _watch(ctl, jobs, set(floaters), 3 * SLICE_S)
        assert all(ctl.audit(j, "suspend") for j in pinned), "every first job gave up its GPU for a turn"
        # The other node frees up: suspended jobs move there (lower the height, §4.2.1),
        # a job bound to one GPU onto its own index of that node.
        c.backend.cancel(wall)
        migs = poll("migrations to the freed node", lambda: ctl.audit(action="migrate") or None, timeout=90, every=1)
        for e in migs:  # type: ignore[union-attr]
            job = e["job"]
            moved_to = c.wait_for(job, "RUNNING", timeout=120, where=lambda j: j.nodes == (other,))
            if job in pinned:
                assert moved_to.gpu_ids == ((other, where[job][1]),)  # type: ignore[index]
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]


def test_gandiva_packs_the_lightest_job_onto_the_lightest_gpu_and_retries_another(gpus4, tmp_path) -> None:
    """Issue 22 item 8 live on a 4-GPU node: a newcomer bound to the node's four GPUs is
    packed, once profiled, with a job on one of them because the hooks measured both as
    light (a slow DataLoader; no NVML here); the packing loses to time-slicing (GPU
    interference emulated by train_shared_device.py, a documented test double, on the GPU
    gpu.json names: it once read another folder and "ran" the newcomer on GPU 0 beside
    that GPU's job wherever the plan put it, so both measured ~50% busy instead of ~25%
    and their sum hovered at the 100% packing limit: packed or not by chance) and is
    undone; the next packing puts it on another GPU, with another job, instead of giving
    up (before: the job was marked pack_failed for good, and only a time-sliced group
    could be packed, on its own GPU)."""
    c = gpus4
    c.clean()
    env = "TRAIN_STEP_SLEEP=0.05 TRAIN_LOAD_SLEEP=0.4 TRAIN_EPOCHS=200"
    g = GandivaRun(
        c,
        tmp_path,
        "train_shared_device.py",
        f"{env} TRAIN_DEVICE_DIR={tmp_path} TRAIN_DEVICE_SWITCH=1.0",
        packing=True,
        migration=False,
        every=1,
    )
    ctl, tsb = g.ctl, g.tsb
    try:
        _, pinned, where = g.fill_a_node()
        gpu_of = {j: where[j][1][0] for j in pinned}
        floater = tsb("f")
        c.wait_for(floater, "RUNNING", timeout=60)

        def packs() -> list[dict] | None:
            got = ctl.audit(floater, "pack")
            if len(got) >= 2:
                return got
            # The double stops a newcomer that cannot tell which GPU it runs on: say so at once.
            state = c.job(floater).state
            assert state in ("RUNNING", "SUSPENDED"), (state, (tmp_path / "f.out").read_text()[-600:])
            return None

        two = poll("the newcomer packed twice", packs, timeout=150, every=1)
    finally:
        ctl.stop()
        c.clean()
    assert "Traceback" not in ctl.logtext(), ctl.logtext()[-3000:]
    unpacks = ctl.audit(floater, "unpack")
    assert unpacks and unpacks[0]["time"] < two[1]["time"]  # type: ignore[index]
    first, second = (re.search(r"onto GPU (\d+) of", p["reason"]) for p in two)  # type: ignore[union-attr]
    assert first is not None and second is not None
    assert first.group(1) != second.group(1), (first.group(0), second.group(0))  # another GPU, not given up
    assert "the lowest waiting" in two[0]["reason"] and re.search(r"\d+ \+ \d+ = \d+% <= 100%", two[0]["reason"])  # type: ignore[index]
    # Each time its partner is the job bound to that GPU: the packed pair shares one GPU. (One
    # packing: the same note on each member's line; their times may differ by a millisecond.)
    for p, m in zip(two, (first, second), strict=True):  # type: ignore[arg-type]
        partners = {
            e["job"]
            for e in ctl.audit(action="pack")
            if e["reason"] == p["reason"] and abs(e["time"] - p["time"]) < 1.0
        } - {floater}
        assert [gpu_of[j] for j in partners] == [int(m.group(1))], (partners, m.group(0))
