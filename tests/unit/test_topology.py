"""One topology description (teiresias/domain/topology.py) for the simulator's
cluster file, the controller's topology.switches and the cells' physical cells."""

from __future__ import annotations

import pytest

from teiresias.cells import config as cells_config
from teiresias.clusterspec import load_cluster
from teiresias.config import parse_config
from teiresias.domain.topology import DEFAULT_SWITCH, Topology
from teiresias.errors import ConfigError
from tests.conftest import REPO

DEMO = (("node1", "node2"), ("node3", "node4"))


def groups(t: Topology) -> tuple[tuple[str, ...], ...]:
    return tuple(nodes for _, nodes in t.switches)


def test_the_three_files_of_the_demo_cluster_give_one_grouping() -> None:
    sim = Topology.of_cluster(load_cluster(REPO / "etc" / "cluster.yaml"))
    cells = cells_config.load(REPO / "etc" / "cells.example.yaml").switches()
    listed = parse_config(
        {
            "topology": {
                "switches": [{"name": "s0", "nodes": ["node1", "node2"]}, {"name": "s1", "nodes": ["node3", "node4"]}]
            }
        }
    ).topology
    mapped = parse_config({"topology": {"switches": {"s0": ["node1", "node2"], "s1": ["node3", "node4"]}}}).topology
    assert sim == listed == mapped and groups(sim) == DEMO
    assert groups(cells) == DEMO
    assert sim.switch_of("node3") == "s1" and sim.switch_of("node9") == DEFAULT_SWITCH


def test_the_controller_keeps_its_one_node_shorthand_and_an_empty_map() -> None:
    cfg = parse_config({"topology": {"switches": {"s0": "node1"}}})
    assert cfg.topology.as_dict() == {"s0": ("node1",)} and cfg.switch_of("node1") == "s0"
    assert parse_config({}).topology == Topology() and parse_config({}).switch_of("x") == DEFAULT_SWITCH


@pytest.mark.parametrize(
    ("switches", "message"),
    [
        ({"a": ["n1"], "b": ["n1"]}, "topology.switches: node n1 is already under switch a"),
        ([{"name": "a", "nodes": ["n1", "n1"]}], "duplicate node names: n1 twice under switch a"),
        ([{"name": "a", "nodes": "n1"}], "topology.switches[0].nodes: must be a list of node names"),
        ([{"name": "a", "nodse": ["n1"]}], "unknown key 'topology.switches[0].nodse' (did you mean 'nodes'?)"),
        ([{"nodes": [{"gpus": 4}]}], "topology.switches[0].nodes[0]: a node needs a name"),
        ("s0", "topology.switches: must map switch names to lists of node names"),
    ],
)
def test_every_form_fails_in_the_one_format(switches: object, message: str) -> None:
    with pytest.raises(ConfigError, match="^x.yaml: ") as err:
        parse_config({"topology": {"switches": switches}}, path="x.yaml")
    assert message in str(err.value)
