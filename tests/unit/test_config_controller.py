"""The controller's YAML config: the shipped example loads; each mistake is one line naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_plugin.config import load_config
from teiresias.errors import ConfigError
from tests.conftest import REPO


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return p


def test_shipped_example_loads():
    cfg = load_config(REPO / "etc" / "teiresias.yaml")
    assert cfg.partitions == ("gpu",)
    assert cfg.policy.queues == (3600.0,)
    assert cfg.poll_interval == 3.0
    assert cfg.backend == "auto"


def test_relative_paths_resolve_against_the_file(tmp_path):
    (tmp_path / "seed.txt").write_text("10\n20\n")
    cfg = load_config(
        write(
            tmp_path,
            "state_db: s/state.db\naudit_log: a.jsonl\n"
            "policy: {name: gittins, queues: [10, 20], gittins_samples: seed.txt}\n",
        )
    )
    assert cfg.state_db == tmp_path / "s" / "state.db"
    assert cfg.audit_log == tmp_path / "a.jsonl"
    assert cfg.policy.gittins_samples == tmp_path / "seed.txt"


def test_topology_maps_nodes_to_switches(tmp_path):
    cfg = load_config(write(tmp_path, "topology:\n  switches:\n    s0: [node1, node2]\n    s1: [node3]\n"))
    assert cfg.switch_of("node2") == "s0" and cfg.switch_of("node3") == "s1"
    assert cfg.switch_of("node9") == "default"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("colour: blue\n", "unknown key 'colour'"),
        ("policy: {name: las, queus: [1]}\n", "unknown key 'policy.queus'"),
        ("policy: {queues: [100, 50]}\n", "policy.queues: thresholds must be strictly increasing"),
        ("policy: {queues: [100, 100]}\n", "strictly increasing"),
        ("policy: {queues: []}\n", "policy.queues"),
        ("policy: {queues: [-5]}\n", "policy.queues[0]: must be > 0"),
        ("poll_interval: fast\n", "poll_interval: must be a number"),
        ("poll_interval: 0\n", "poll_interval: must be > 0"),
        ("backend: grpc\n", "backend: must be one of auto, cli, restd, pyslurm"),
        ("partitions: []\n", "partitions: must be a non-empty list"),
        ("packlimit: -1\n", "packlimit: must be >= 0"),
        ("preemption: {grace_seconds: -1}\n", "preemption.grace_seconds: must be >= 0"),
        ("policy: {gittins_samples: nope.txt}\n", "does not exist"),
        ("topology: {switches: {a: [n1], b: [n1]}}\n", "already under switch a"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("policy: [1, 2\n", "is not valid YAML"),
    ],
)
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert str(path) in msg and needle in msg, msg


def test_missing_file_names_the_flag(tmp_path):
    with pytest.raises(ConfigError, match="pass --config FILE"):
        load_config(tmp_path / "absent.yaml")


def test_policy_last_queue_reaches_the_controllers_policy(tmp_path):
    from slurm_plugin.controller.loop import default_policy
    from teiresias.policy.gittins import ServiceDistribution

    cfg = load_config(write(tmp_path, "policy: {name: gittins, last_queue: gittins}\n"))
    assert cfg.policy.last_queue == "gittins"
    assert default_policy(cfg, ServiceDistribution([1.0, 2.0])).last_queue == "gittins"
    # Unset: gittins' default, the index (docs/policies.md, "Defaults"); fifo is the paper's.
    assert load_config(write(tmp_path, "policy: {name: gittins}\n")).policy.last_queue is None
    assert (
        default_policy(load_config(write(tmp_path, "policy: {}\n")), ServiceDistribution([1.0])).last_queue == "gittins"
    )
    paper = load_config(write(tmp_path, "policy: {name: gittins, last_queue: fifo, queue_order: fifo}\n"))
    p = default_policy(paper, ServiceDistribution([1.0, 2.0]))
    assert (p.last_queue, p.queue_order) == ("fifo", "fifo")
    for text, needle in [
        ("policy: {name: gittins, last_queue: lifo}\n", "policy.last_queue: must be one of fifo, gittins"),
        ("policy: {name: las, last_queue: gittins}\n", "set policy.name: gittins"),
        ("policy: {name: fifo, queue_order: lifo-resume}\n", "policy.queue_order: orders las/gittins queues"),
        ("policy: {queue_order: lifo}\n", "policy.queue_order: must be one of fifo, running-first, lifo-resume"),
        ("policy: {time_limits: maybe}\n", "policy.time_limits"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            load_config(write(tmp_path, text))


def test_policy_queues_auto_fits_the_thresholds_to_the_samples(tmp_path):
    from slurm_plugin.controller.loop import default_policy, fitted_queues
    from teiresias.policy.gittins import ServiceDistribution
    from teiresias.policy.thresholds import fit_thresholds

    cfg = load_config(write(tmp_path, "policy: {name: las, queues: auto}\n"))
    assert cfg.policy.queues_auto and cfg.policy.queues == (3600.0,)
    # No samples yet: the paper's hour. With samples: the fit, for las too.
    assert fitted_queues(cfg, None) == (3600.0,)
    d = ServiceDistribution.from_samples_file(REPO / "teiresias" / "data" / "yarn-gput1000.csv")
    assert default_policy(cfg, d).thresholds == fit_thresholds(d).thresholds != (3600.0,)
    assert default_policy(load_config(write(tmp_path, "policy: {name: las}\n")), d).thresholds == (3600.0,)
    with pytest.raises(ConfigError, match="policy.queues: auto fits las/gittins"):
        load_config(write(tmp_path, "policy: {name: fifo, queues: auto}\n"))
    with pytest.raises(ConfigError, match="or auto, got 'automatic'"):
        load_config(write(tmp_path, "policy: {queues: automatic}\n"))
