"""``teiresias cells``: offline config view, live binding from a JSON file or the controller's DB, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from teiresias.cells import config
from teiresias.cells.scheduler import CellsPolicy
from teiresias.cells.state import META_KEY
from teiresias.cli import cli
from teiresias.domain import Cluster, Snapshot
from teiresias.policy.registry import build_policy
from teiresias.policy.testing import pending

EXAMPLE = str(Path(__file__).resolve().parents[2] / "etc" / "cells.example.yaml")
CLUSTER = Cluster.from_tiresias_spec(2, 2, 4, node_names=["node1", "node2", "node3", "node4"])


def run(*args: str):
    # --no-slurm: these tests are about the config and the binding, not the node states of
    # whatever Slurm this machine may have; reading them is tested below and in tests/slurm/.
    return CliRunner().invoke(cli, ["cells", "--no-slurm", *args], catch_exceptions=False)


def live_state() -> dict:
    p = CellsPolicy(config.load(EXAMPLE), build_policy("fifo"))
    jobs = [pending(1, 4, account="team-a"), pending(2, 4, account="team-a"), pending(3, 2, account="guest")]
    return p.decide(Snapshot(0.0, CLUSTER, jobs)).cells.to_json()


def test_offline_shows_config_and_empty_binding() -> None:
    r = run("--config", EXAMPLE)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0].split()[:5] == ["VC", "ACCOUNTS", "CELL", "GPUS", "QUOTA"]
    assert lines[0].split()[7:9] == ["LOST", "LOST_GPUS"]
    assert lines[1].split() == ["vc-a", "team-a", "node", "4", "1", "0", "0", "0", "0", "-", "-"]
    assert "16 GPUs on 4 nodes" in r.output and "offline" in r.output


def test_json_and_down_nodes_show_lost_guarantee() -> None:
    r = run("-c", EXAMPLE, "--down", "node1,node2,node3", "--json")
    assert r.exit_code == 0
    out = json.loads(r.output)
    assert out["live"] is False and out["bad_nodes"] == ["node1", "node2", "node3"]
    lost = {vc["name"]: vc["lost_gpus"] for vc in out["vcs"]}
    assert lost == {"vc-a": 0, "vc-b": 8}


def test_live_binding_from_json_file(tmp_path: Path) -> None:
    f = tmp_path / "binding.json"
    f.write_text(json.dumps(live_state()))
    out = json.loads(run("-c", EXAMPLE, "--state", str(f), "--json").output)
    vc_a = out["vcs"][0]
    assert vc_a["guaranteed_jobs"] == [1] and vc_a["opportunistic_jobs"] == [2]
    assert vc_a["quota"][0]["bound"] == 1 and vc_a["guaranteed_gpus"] == 4
    assert out["other_jobs"] == [3] and out["live"] is True


def test_live_binding_from_controller_state_db(tmp_path: Path) -> None:
    from slurm_plugin.controller.state import StateStore

    db = tmp_path / "state.db"
    store = StateStore(db)
    store.set_meta(META_KEY, json.dumps(live_state()))
    store.close()
    r = run("-c", EXAMPLE, "-s", str(db))
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1].split() == ["vc-a", "team-a", "node", "4", "1", "1", "4", "0", "0", "1", "2"]
    # A database where no cells round ran yet: empty binding, not an error.
    empty = tmp_path / "empty.db"
    StateStore(empty).close()
    assert run("-c", EXAMPLE, "-s", str(empty)).exit_code == 0


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"bindings": 3}')
    for args, msg in [
        (["-c", str(tmp_path / "missing.yaml")], "no such file"),
        (["-c", EXAMPLE, "--down", "node9"], "--down node9: not in the cells configuration"),
        (["-c", EXAMPLE, "--state", str(bad)], "cells binding state is malformed"),
        (["-c", EXAMPLE, "--state", str(tmp_path / "nope.db")], "no such file"),
    ]:
        r = CliRunner().invoke(cli, ["cells", *args])
        assert r.exit_code == 2, (args, r.output)
        err = r.output.strip().splitlines()
        assert len(err) == 1 and msg in err[0], r.output


def test_node_states_not_read_is_said_not_hidden(tmp_path: Path, monkeypatch) -> None:
    """No Slurm to ask (no controller config, no SLURM_CONF): one line on stderr says so; the
    report goes on with --down's nodes. Not a double: this machine's Slurm commands really fail."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("TEIRESIAS_CONFIG", raising=False)
    r = CliRunner().invoke(cli, ["cells", "-c", EXAMPLE, "--down", "node2"])
    assert r.exit_code == 0, r.output
    assert r.stderr.count("\n") == 1 and "node states not read from Slurm" in r.stderr
    assert "bad nodes: node2" in r.stdout and "node states: not read" in r.stdout
    out = json.loads(CliRunner().invoke(cli, ["cells", "-c", EXAMPLE, "--json"]).stdout)
    assert out["node_states"].startswith("not read")
    # A controller config given explicitly that does not load is bad input: exit 2, one line.
    r = CliRunner().invoke(cli, ["cells", "-c", EXAMPLE, "-C", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
