"""GPU counts in every form Slurm 22.05 prints them: gres_detail with
non-adjacent indices (``gpu:2(IDX:0,2)``), typed counts, TRES strings,
per-node lists. Real output captured from the local cluster by
tests/fixtures/slurm/capture_noncontig.sh, plus generated index sets."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin.backends.parse import (
    array_task_ids,
    gres_count,
    job_gpus,
    parse_scontrol_job,
    parse_sinfo_json,
    parse_squeue_json,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def idx_text(indices: list[int]) -> str:
    """Slurm's way of printing a GPU index set: runs as a-b, singles alone."""
    runs: list[str] = []
    i = 0
    while i < len(indices):
        j = i
        while j + 1 < len(indices) and indices[j + 1] == indices[j] + 1:
            j += 1
        runs.append(str(indices[i]) if i == j else f"{indices[i]}-{indices[j]}")
        i = j + 1
    return ",".join(runs)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.sets(st.integers(0, 15), min_size=1, max_size=16), min_size=1, max_size=6),
    gtype=st.sampled_from(["", "tesla:", "a100_80g:"]),
)
def test_count_is_the_number_of_indices_whatever_their_spacing(nodes, gtype):
    detail = [f"gpu:{gtype}{len(s)}(IDX:{idx_text(sorted(s))})" for s in nodes]
    for entry, s in zip(detail, nodes):
        assert gres_count(entry) == len(s), entry
        assert gres_count(entry + ",mps:100") == len(s)
    gpus, _ = job_gpus({"gres_detail": detail, "tres_per_job": "gres:gpu:1", "node_count": len(nodes)})
    assert gpus == sum(len(s) for s in nodes)


def test_every_form_slurm_prints():
    assert gres_count("gpu:2(IDX:0,2)") == 2
    assert gres_count("gpu:2(IDX:1,3)") == 2
    assert gres_count("gpu:tesla:3(IDX:0,2-3)") == 3
    assert gres_count("gres:gpu:4") == 4 and gres_count("gres:gpu:tesla:4") == 4
    assert gres_count("gpu") == 1
    # TRES: the untyped total stands beside the typed one; counted once
    assert gres_count("cpu=4,mem=16000M,node=2,billing=4,gres/gpu=4,gres/gpu:tesla=4") == 4
    assert gres_count("cpu=4,gres/gpu:tesla=2,gres/gpu:v100=1") == 3
    # a per-node list in one string (gres_used, sinfo)
    assert gres_count("gpu:2(IDX:0,2),gpu:1(IDX:3)") == 3
    # not a GPU count: job_submit.lua refuses these; never counted as GPUs
    assert gres_count("gres:gpu:-1") == 0 and gres_count("gres:gpu:abc") == 0 and gres_count("gres:gpu:0") == 0


def test_captured_four_node_job_with_non_adjacent_indices():
    ((name, _, job_id),) = [i.partition("=") for i in (FIX / "squeue_noncontig.ids").read_text().split()]
    jobs = {j.job_id: j for j in parse_squeue_json((FIX / "squeue_noncontig.json").read_text())}
    j = jobs[int(job_id)]
    assert (j.state, j.gpus, j.gpus_per_node, j.num_nodes) == ("RUNNING", 8, 2, 4)
    assert j.nodes == ("node1", "node2", "node3", "node4")
    line = (FIX / "scontrol_noncontig.txt").read_text()
    assert "IDX:0,2" in line
    s = parse_scontrol_job(line)
    assert (s.state, s.gpus, s.gpus_per_node, s.num_nodes) == ("RUNNING", 8, 2, 4)
    # every fill job holds one GPU: the sum over the queue matches the nodes' use
    running = sum(x.gpus for x in jobs.values() if x.state == "RUNNING")
    assert running == sum(n.gpus_used for n in parse_sinfo_json((FIX / "sinfo_noncontig.json").read_text()))


def test_array_task_sets():
    assert array_task_ids("0-5") == [0, 1, 2, 3, 4, 5]
    assert array_task_ids("0-1,3-5") == [0, 1, 3, 4, 5]
    assert array_task_ids("1,3-7:2%2") == [1, 3, 5, 7]
    assert array_task_ids("") == []


def test_pyslurm_gres_dicts_follow_the_same_rule():
    from slurm_plugin.backends.pyslurm_backend import _gpus

    assert _gpus({"gpu": 4}) == 4 and _gpus({"gpu:tesla": 4}) == 4
    assert _gpus({"gpu": "2(IDX:0,2)"}) == 2 and _gpus({"gpu:tesla": "3(IDX:0,2-3)", "mps": 100}) == 3
    assert _gpus(None) == 0
