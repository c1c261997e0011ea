"""Shard jobs (``--gres=shard:N``) as Slurm 22.05 prints them, counted as one
shared GPU per node (docs/sjf-bsbf.md §9). The job dicts and scontrol lines
are the real output recorded in ../shared/notes/gpu-sharing-on-slurm.md §5,
trimmed to the fields the parser reads."""

from __future__ import annotations

from slurm_plugin.backends.parse import job_gpus, job_shards, parse_job, parse_scontrol_job

RUNNING_1NODE = {
    "job_id": 23,
    "job_state": "RUNNING",
    "nodes": "node2",
    "node_count": 1,
    "tres_per_node": "gres:shard:4",
    "gres_detail": ["shard:4(IDX:1)"],
    "tres_alloc_str": "cpu=1,node=1,billing=1",
}
RUNNING_2NODES = {
    "job_id": 3,
    "job_state": "RUNNING",
    "nodes": "node[1-2]",
    "node_count": 2,
    "tres_per_node": "gres:shard:2",
    "gres_detail": ["shard:2(IDX:3)", "shard:2(IDX:0)"],
    "tres_alloc_str": "cpu=2,node=2,billing=2,gres/shard=4",
}
PENDING = {
    "job_id": 24,
    "job_state": "PENDING",
    "state_reason": "JobHeldUser",
    "nodes": "",
    "node_count": 1,
    "tres_per_node": "gres:shard:1",
    "gres_detail": [],
}
TYPED = {
    "job_id": 25,
    "job_state": "RUNNING",
    "nodes": "node1",
    "node_count": 1,
    "tres_per_node": "gres:shard:1",
    "gres_detail": ["shard:g0:1(IDX:0),shard:g1:0(IDX:),shard:g2:0(IDX:),shard:g3:0(IDX:)"],
}
GPU_JOB = {
    "job_id": 27,
    "job_state": "RUNNING",
    "nodes": "node1",
    "node_count": 1,
    "tres_per_node": "gres:gpu:2",
    "gres_detail": ["gpu:2(IDX:0-1)"],
}


def test_a_shard_job_is_one_shared_gpu_per_node_not_zero_and_not_n():
    assert job_gpus(RUNNING_1NODE) == (1, 1) and job_shards(RUNNING_1NODE) == 4
    assert job_gpus(RUNNING_2NODES) == (2, 1) and job_shards(RUNNING_2NODES) == 2
    assert job_gpus(PENDING) == (1, 1) and job_shards(PENDING) == 1
    # typed nodes list the GPUs it got no shard from with a count of 0: skipped
    assert job_gpus(TYPED) == (1, 1) and job_shards(TYPED) == 1


def test_a_gpu_job_is_unchanged_and_has_no_shards():
    assert job_gpus(GPU_JOB) == (2, 2) and job_shards(GPU_JOB) == 0


def test_parse_job_carries_the_shards():
    sj = parse_job(PENDING)
    assert (sj.gpus, sj.gpus_per_node, sj.shards, sj.held) == (1, 1, 1, True)
    assert parse_job(GPU_JOB).shards == 0


def test_scontrol_shard_job():
    line = (
        "JobId=3 JobName=a UserId=root(0) Priority=1 JobState=RUNNING Reason=None Restarts=0"
        " NumNodes=2 NodeList=node[1-2] JOB_GRES=shard:4 TresPerNode=gres:shard:2 SubmitTime=2026-01-01T00:00:00"
    )
    sj = parse_scontrol_job(line)
    assert (sj.gpus, sj.gpus_per_node, sj.shards) == (2, 1, 2)
    pend = parse_scontrol_job(
        "JobId=4 JobName=b UserId=root(0) Priority=0 JobState=PENDING Reason=JobHeldUser"
        " NumNodes=1 TresPerNode=gres:shard:1 SubmitTime=2026-01-01T00:00:00"
    )
    assert (pend.gpus, pend.gpus_per_node, pend.shards) == (1, 1, 1)


# ---------------------------------------------------------------- per-GPU types (controller/gpus.py)
# Real output of 22.05.8 on a node with one Type per GPU (docs/gandiva.md "Which GPU a shard job gets").
PINNED = {
    "job_id": 4,
    "job_state": "RUNNING",
    "nodes": "node1",
    "node_count": 1,
    "tres_per_node": "gres:shard:g1:1",
    "gres_detail": ["shard:g1:1(IDX:1)"],
}
FLOATER = {
    "job_id": 5,
    "job_state": "RUNNING",
    "nodes": "node1",
    "node_count": 1,
    "tres_per_node": "gres:shard:g0:1,gres:shard:g1:1,gres:shard:g2:1,gres:shard:g3:1",
    "gres_detail": ["shard:g0:1(IDX:0),shard:g1:1(IDX:1),shard:g2:1(IDX:2),shard:g3:1(IDX:3)"],
}
GPU_ON_TYPED = {
    "job_id": 6,
    "job_state": "RUNNING",
    "nodes": "node1",
    "node_count": 1,
    "tres_per_node": "gres:gpu:2",
    "gres_detail": ["gpu:g0:1(IDX:0),gpu:g1:0(IDX:),gpu:g2:1(IDX:2),gpu:g3:0(IDX:)"],
}
STASHED = {
    "job_id": 7,
    "job_state": "PENDING",
    "state_reason": "JobHeldUser",
    "nodes": "",
    "node_count": 1,
    "admin_comment": "teiresias:held;teiresias:shard=2",
    "gres_detail": [],
}


def test_typed_shards_name_the_gpu_and_a_floater_is_one_gpu_with_one_shard_each():
    pinned, floater, gpu = parse_job(PINNED), parse_job(FLOATER), parse_job(GPU_ON_TYPED)
    assert (pinned.gpus, pinned.shards, pinned.shard_gpus, pinned.gpu_ids) == (1, 1, (1,), (("node1", (1,)),))
    assert (floater.gpus, floater.shards, floater.shard_gpus) == (1, 1, (0, 1, 2, 3))
    assert floater.gpu_ids == (("node1", (0, 1, 2, 3)),)
    assert (gpu.gpus, gpu.shards, gpu.shard_gpus, gpu.gpu_ids) == (2, 0, (), (("node1", (0, 2)),))


def test_a_held_job_whose_shard_request_job_submit_lua_kept_aside_is_still_a_gpu_job():
    j = parse_job(STASHED)
    assert (j.gpus, j.shards, j.gpus_per_node, j.shard_gpus, j.gpu_ids) == (1, 2, 1, (), ())


def test_scontrol_typed_shard_job_names_its_gpu():
    line = (
        "JobId=4 JobName=wrap UserId=root(0) Priority=1 JobState=RUNNING Reason=None Restarts=1"
        " NodeList=node1 NumNodes=1 TresPerNode=gres:shard:g1:2 JOB_GRES=shard:g1:2"
        " Nodes=node1 CPU_IDs=0 Mem=0 GRES=shard:g1:2(IDX:1) AdminComment="
    )
    j = parse_scontrol_job(line)
    assert (j.gpus, j.shards, j.shard_gpus, j.gpu_ids) == (1, 2, (1,), (("node1", (1,)),))


def test_node_gres_with_one_type_per_gpu():
    from slurm_plugin.backends.parse import parse_node

    n = parse_node(
        {
            "name": "node1",
            "state": "idle",
            "gres": "gpu:g0:1(S:0),gpu:g1:1(S:0),shard:g0:4(S:0),shard:g1:4(S:0)",
            "partitions": ["gpu"],
        }
    )
    assert (n.gpus, n.shard_gpus) == (2, (0, 1))
    assert parse_node({"name": "n", "state": "idle", "gres": "gpu:4,shard:16"}).shard_gpus == ()
