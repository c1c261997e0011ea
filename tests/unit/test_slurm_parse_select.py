"""Backend selection, and the pyslurm backend's mapping.

No pyslurm can be built for this host's Slurm 22.05 (PyPI has 25.11 only), so
the version-match rule and the attribute mapping are checked with a stand-in
module / objects carrying pyslurm 25.11's attribute names: a fake for a
situation this machine cannot produce, and the only one in these tests.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from slurm_plugin.backends.cli import CliBackend
from slurm_plugin.backends.pyslurm_backend import job_from_pyslurm, node_from_pyslurm, pyslurm_usable
from slurm_plugin.backends.select import select_backend
from teiresias.errors import ConfigError, SlurmError


def test_names():
    assert isinstance(select_backend("cli", env={}), CliBackend)
    with pytest.raises(ConfigError, match="auto, cli, restd, pyslurm"):
        select_backend("slurmpy", env={})
    with pytest.raises(ConfigError, match="SLURMRESTD_SOCKET"):
        select_backend("restd", env={})
    assert select_backend("restd", env={"SLURMRESTD_SOCKET": "/x.sock"}).socket_path == "/x.sock"


def test_without_pyslurm_auto_is_cli_and_pyslurm_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` fail, as on this host
    ok, why = pyslurm_usable("22.05.8")
    assert not ok and "import pyslurm" in why and "25.11" in why
    assert isinstance(select_backend("auto", env={}), CliBackend)
    with pytest.raises(SlurmError, match="import pyslurm"):
        select_backend("pyslurm", env={})


@pytest.mark.parametrize(
    "built,site,usable",
    [
        ("25.11.2", "22.05.8", False),
        ("22.5.0", "22.05.8", True),
        ("22.05.1", "22.05.8", True),
        ("22.05.1", None, False),
    ],
)
def test_version_must_match_major_minor(monkeypatch, built, site, usable):
    monkeypatch.setitem(sys.modules, "pyslurm", types.SimpleNamespace(__version__=built))
    ok, why = pyslurm_usable(site)
    assert ok is usable, why
    if not usable and site:
        assert built in why and site in why


def test_pyslurm_objects_map_to_the_interface():
    job = SimpleNamespace(
        id=7,
        name="train",
        user_name="ann",
        account="lab",
        partition="gpu",
        state="RUNNING",
        state_reason="None",
        priority=100,
        requeue_count=2,
        is_requeueable=True,
        num_nodes=2,
        gres_per_node={"gpu": 4},
        allocated_nodes="node[1-2]",
        required_nodes="",
        submit_time=10,
        eligible_time=11,
        start_time=12,
        end_time=999,
        time_limit=30,
        command="/x.sh",
        comment="c",
    )
    j = job_from_pyslurm(job)
    assert (j.job_id, j.gpus, j.gpus_per_node, j.nodes, j.restart_count) == (7, 8, 4, ("node1", "node2"), 2)
    assert j.start_time == 12 and j.end_time is None and not j.held
    node = SimpleNamespace(
        name="node1",
        state="MIXED+DRAIN",
        configured_gres={"gpu:a100": 4},
        allocated_gres={"gpu:a100": 1},
        partitions=["gpu"],
        total_cpus=8,
        real_memory=100,
    )
    n = node_from_pyslurm(node)
    assert n.state == {"MIXED", "DRAIN"} and (n.gpus, n.gpus_used) == (4, 1) and not n.usable


def test_cli_poll_mode():
    assert select_backend("cli", env={}, poll="scontrol").poll == "scontrol"
    assert select_backend("cli", env={}, poll="fields").poll == "fields"
    with pytest.raises(ConfigError, match="choose one of json, scontrol, fields"):
        select_backend("cli", env={}, poll="fast")
