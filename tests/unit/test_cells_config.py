"""Cells configuration: the example loads, and every mistake is one ConfigError line naming file and key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from teiresias.cells import config
from teiresias.domain import Cluster
from teiresias.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml"

BASE = {
    "cell_types": {
        "gpu": {},
        "pair": {"child": "gpu", "count": 2},
        "node": {"child": "pair", "count": 2, "node": True},
        "rack": {"child": "node", "count": 2},
    },
    "physical_cells": [{"type": "rack", "nodes": "n[1-2]"}, {"type": "rack", "nodes": ["n3", "n4"]}],
    "virtual_clusters": {
        "a": {"accounts": ["ta"], "quota": {"node": 1}},
        "b": {"accounts": ["tb", "tc"], "quota": {"rack": 1, "pair": 1}},
    },
}


def demo_cluster(gpus: int = 4) -> Cluster:
    return Cluster.from_tiresias_spec(2, 2, gpus, node_names=["node1", "node2", "node3", "node4"])


def with_change(path: str, value) -> dict:
    raw = copy.deepcopy(BASE)
    *keys, last = path.split(".")
    d = raw
    for k in keys:
        d = d[int(k)] if k.isdigit() else d[k]
    if value is None:
        del d[last]
    else:
        d[last] = value
    return raw


def test_example_loads_and_matches_the_demo_cluster() -> None:
    cfg = config.load(EXAMPLE, cluster=demo_cluster())
    assert cfg.node_names == ("node1", "node2", "node3", "node4")
    chain = cfg.chains["switch"]
    assert [t.gpus for t in chain.types] == [1, 2, 4, 8]
    assert chain.node_level == 3 and chain.node_gpus == 4
    assert cfg.vc_of_account("team-b-students") == "vc-b"
    assert cfg.vc_of_account("nobody") is None
    assert [cfg.quota_gpus(v) for v in cfg.vcs] == [4, 8]
    topo = cfg.topology()
    assert topo.total_gpus == 16 and sorted(topo.node_cells) == ["node1", "node2", "node3", "node4"]
    assert topo.by_address["node2/1/0"].gpus == 1


def test_hostlist_expansion() -> None:
    assert config.expand_hostlist("gpu[01-03,07]") == ["gpu01", "gpu02", "gpu03", "gpu07"]
    assert config.expand_hostlist("a,b") == ["a", "b"]
    with pytest.raises(ValueError):
        config.expand_hostlist("gpu[3-1]")


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            "virtual_clusters.a.quota",
            {"node": 3},
            "virtual_clusters: quotas of node cells in chain rack (a=3) need 3 but only 2 can be honoured at once",
        ),
        ("virtual_clusters.a.quota", {"node": 2}, "quotas of pair cells in chain rack (b=1) need 1 but only 0"),
        ("cell_types.gpu", {"child": "rack", "count": 2}, "cell_types.rack.child: cycle in cell types"),
        ("cell_types.node.child", "socket", "cell_types.node.child: unknown cell type 'socket'"),
        ("physical_cells.0.nodes", ["n1", "n2", "n9"], "physical_cells[0].nodes: a rack cell holds 2 node(s)"),
        ("physical_cells.1.nodes", ["n2", "n3"], "physical_cells[1].nodes: node n2 is already in physical_cells[0]"),
        ("cell_types.node.node", None, "has no type marked node: true"),
        ("cell_types.pair.count", 0, "cell_types.pair.count: must be a positive integer"),
        (
            "cell_types.pair.size",
            2,
            "unknown key 'cell_types.pair.size'; valid keys under cell_types.pair are: child, count, node",
        ),
        ("virtual_clusters.b.accounts", ["ta"], "account ta is already in VC a"),
        ("virtual_clusters.b.quota", {"socket": 1}, "virtual_clusters.b.quota.socket: unknown cell type 'socket'"),
        ("virtual_clusters.b.quota", {"pair": -1}, "must be a non-negative integer"),
        ("physical_cells.0.type", "blade", "physical_cells[0].type: unknown cell type 'blade'"),
        ("physical_cells.0.nodes", "n[2-1]", "bad hostlist"),
    ],
)
def test_validation_errors_name_the_key(path: str, value, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        config.parse(with_change(path, value), "cells.yaml")
    text = str(exc.value)
    assert text.startswith("cells.yaml: ") and message in text and "\n" not in text


def test_unknown_nodes_and_gpu_mismatch_against_slurm() -> None:
    raw = copy.deepcopy(BASE)
    raw["physical_cells"] = [
        {"type": "rack", "nodes": ["node1", "node2"]},
        {"type": "rack", "nodes": ["node3", "gpu9"]},
    ]
    with pytest.raises(ConfigError, match=r"physical_cells\[1\].nodes: unknown node gpu9: not in the Slurm cluster"):
        config.parse(raw, "cells.yaml", cluster=demo_cluster())
    raw["physical_cells"][1]["nodes"] = ["node3", "node4"]
    with pytest.raises(ConfigError, match="node node1 has 8 GPUs in Slurm but a node cell holds 4"):
        config.parse(raw, "cells.yaml", cluster=demo_cluster(gpus=8))
    assert config.parse(raw, "cells.yaml", cluster=demo_cluster()).node_names[-1] == "node4"


def test_ambiguous_type_in_two_chains_needs_the_chain() -> None:
    raw = copy.deepcopy(BASE)
    raw["physical_cells"].append({"type": "node", "nodes": ["n5"]})
    raw["virtual_clusters"]["a"]["quota"] = {"rack/node": 1}
    raw["virtual_clusters"]["b"]["quota"] = {"rack": 1}  # rack is in one chain only
    raw["virtual_clusters"]["c"] = {"quota": {"node": 1}}
    with pytest.raises(ConfigError, match=r"virtual_clusters.c.quota.node: .* write one of: rack/node, node/node"):
        config.parse(raw, "cells.yaml")
    raw["virtual_clusters"]["c"] = {"quota": {"node/node": 1}}
    cfg = config.parse(raw, "cells.yaml")
    assert cfg.vcs[-1].quota[0].chain == "node" and cfg.vcs[-1].accounts == ("c",)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        config.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cell_types: [\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        config.load(bad)
