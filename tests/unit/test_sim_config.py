"""Cluster specs (Tiresias CSV, YAML) and the per-model slowdown table."""

from pathlib import Path

import pytest
import yaml

from teiresias.clusterspec import load_cluster
from teiresias.errors import ConfigError
from teiresias.simulator.slowdown import BUILTIN_DEFAULT, BUILTIN_MODELS, SlowdownTable, load_slowdown

ROOT = Path(__file__).resolve().parents[2]


def test_tiresias_csv_spec(tmp_path):
    p = tmp_path / "n.csv"
    p.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,3,8,64,256")
    c = load_cluster(p)
    assert c.total_gpus == 48 and len(c.switches()) == 2
    assert c.nodes[3].name == "s1n0" and c.nodes[3].switch == "s1" and c.nodes[3].cpus == 64


def test_yaml_counts_and_explicit_forms(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("num_switch: 1\nnum_node_p_switch: 15\nnum_gpu_p_node: 4\n")
    assert load_cluster(p).total_gpus == 60
    q = tmp_path / "b.yaml"
    q.write_text("gpus_per_node: 4\nswitches:\n  - name: top\n    nodes: [a, {name: b, gpus: 8}]\n")
    c = load_cluster(q)
    assert [(n.name, n.switch, n.gpus) for n in c.nodes] == [("a", "top", 4), ("b", "top", 8)]


def test_shipped_etc_cluster_yaml_is_the_demo_cluster():
    c = load_cluster(ROOT / "etc" / "cluster.yaml")
    assert [n.name for n in c.nodes] == ["node1", "node2", "node3", "node4"] and c.total_gpus == 16


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("c.csv", "num_switch,num_gpu_p_node\n1,4\n", "c.csv:1: missing column num_node_p_switch"),
        ("c.csv", "num_switch,num_node_p_switch,num_gpu_p_node\n1,x,4\n", "num_node_p_switch must be an integer"),
        ("c.csv", "num_switch,num_node_p_switch,num_gpu_p_node\n1,2,4\n1,2,4\n", "exactly one data row"),
        ("c.yaml", "switches:\n  - nodes: [a]\n", "no GPU count"),
        ("c.yaml", "gpus_per_node: 4\nswitches:\n  - nodes: [a, a]\n", "duplicate node names"),
        ("c.yaml", "num_switch: [\n", "not valid YAML"),
    ],
)
def test_bad_cluster_specs(tmp_path, name, text, message):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        load_cluster(p)
    assert "\n" not in str(err.value) and str(p) in str(err.value)


def test_etc_slowdown_yaml_equals_the_builtin_table():
    """The simulator's default must be exactly what etc/slowdown.yaml documents."""
    table = load_slowdown(ROOT / "etc" / "slowdown.yaml")
    assert dict(table.models) == BUILTIN_MODELS and table.default == BUILTIN_DEFAULT


def test_slowdown_lookup_and_validation(tmp_path):
    t = SlowdownTable()
    assert t.profile("VGG16").slowdown == 1.64 and t.profile("ResNet50").slowdown == 1.0
    assert t.profile("unknown-model").skew is None
    # Sensitive exactly where Table 6's largest-tensor ratio is high.
    for name, prof in BUILTIN_MODELS.items():
        assert (prof.slowdown > 1.0) == (prof.skew > 0.5), name
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"models": {"vgg16": {"skew": 0.7, "slowdown": 0.5}}}))
    with pytest.raises(ConfigError, match="models.vgg16.slowdown: must be >= 1.0"):
        load_slowdown(p)
