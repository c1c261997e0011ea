"""Where a job may run as its owner asked Slurm (controller/constraints.py): -w, -x,
--constraint and a GPU type, and the jobs they make unstartable (issue 20 B5, B6)."""

from dataclasses import replace

from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.backends.parse import gres_types, job_gpu_type
from slurm_plugin.controller.constraints import (
    feature_match,
    never_fits_nodes,
    node_constraint,
    waiting_reason,
)
from tests.unit.test_controller_ops import sjob

NODES = [
    SlurmNode("node1", frozenset({"IDLE"}), 4, 0, ("gpu",), features=frozenset({"fast"})),
    SlurmNode("node2", frozenset({"IDLE"}), 4, 0, ("gpu",), gpu_types=frozenset({"a100"})),
    SlurmNode("node3", frozenset({"IDLE"}), 4, 0, ("gpu",), features=frozenset({"fast", "big"})),
    SlurmNode("node4", frozenset({"IDLE"}), 4, 0, ("other",)),
]


def test_gpu_types_are_read_from_every_gres_form() -> None:
    assert gres_types("gpu:a100:4(S:0-1),gpu:v100:2") == {"a100", "v100"}
    assert gres_types("gpu:4") == frozenset() and gres_types("gres/gpu:a100=2,gres/gpu=2") == {"a100"}
    assert job_gpu_type("", "gres:gpu:nosuchtype:4") == "nosuchtype" and job_gpu_type("gres:gpu:2") == ""


def test_features_plain_and_or_and_unmodelled() -> None:
    assert feature_match("fast", frozenset({"fast"})) and not feature_match("fast&big", frozenset({"fast"}))
    assert feature_match("big|fast", frozenset({"fast"})) and feature_match("fast,big", frozenset({"big", "fast"}))
    assert feature_match("[fast|big]", frozenset()) is None and feature_match("fast*2", frozenset()) is None


def test_allowed_and_required_nodes() -> None:
    c = node_constraint(replace(sjob(1), excluded_nodes=("node1",), features="fast"), "", NODES)
    assert c.allowed == {"node3"} and c.required == frozenset() and c.note == "-x node1; --constraint=fast"
    w = node_constraint(sjob(2), "node3", NODES)
    assert w.allowed is None and w.required == {"node3"} and w.any
    assert not node_constraint(sjob(3), "", NODES).any
    typed = node_constraint(replace(sjob(4), gpu_type="a100"), None, NODES)
    assert typed.allowed == {"node2"}
    assert "3 free there, 7 in all" in waiting_reason(4, w, {"node1": 4, "node3": 3})


def test_jobs_their_nodes_can_never_hold() -> None:
    missing = replace(sjob(1), gpu_type="v100")
    why = never_fits_nodes(missing, node_constraint(missing, "", NODES), NODES)
    assert "GPU type v100; no node of partition gpu has it (types there: a100)" in why
    too_big = replace(sjob(2), gpus=5, excluded_nodes=("node1", "node2"))
    assert "leaves 4 in partition gpu" in never_fits_nodes(too_big, node_constraint(too_big, "", NODES), NODES)
    outside = sjob(3)
    assert "not in partition gpu" in never_fits_nodes(outside, node_constraint(outside, "node4", NODES), NODES)
    fine = replace(sjob(4), gpu_type="a100")
    assert never_fits_nodes(fine, node_constraint(fine, "", NODES), NODES) is None
