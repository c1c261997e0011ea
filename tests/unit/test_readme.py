"""What a newcomer meets in the README, checked without a cluster (the blocks
themselves run in tests/slurm/test_readme_commands.py): the set-up commands,
table commands that are run somewhere, files the README names, the shipped
Philly samples, and synth -> simulate chaining on the example cluster."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from tests.readme_blocks import README, ROOT, SETUP, bash_blocks, subcommand, table_commands

# Needs a profiled multi-GPU job that has ended and been aggregated by the
# controller: run for real in tests/slurm/test_profile_live.py, not in the README.
# from-sacct needs sacct output of a cluster with accounting (slurmdbd + MariaDB):
# run for real in tests/slurm/test_sacct_replay.py.
NOT_IN_A_BLOCK = {"teiresias profile show", "teiresias trace from-sacct"}


def test_setup_block_is_the_two_commands() -> None:
    assert bash_blocks()[0] == list(SETUP)


def test_every_table_command_runs_in_a_block() -> None:
    ran = [c for block in bash_blocks()[1:] for c in block]
    table = table_commands()
    assert len(table) >= 8, table
    for cmd in table:
        sub = subcommand(cmd)
        if sub in NOT_IN_A_BLOCK:
            continue
        assert any(sub in c for c in ran), f"README table command {cmd!r}: no block runs {sub!r}"


def test_files_the_readme_names_exist() -> None:
    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"\b((?:etc|docs|teiresias/data|scripts)/[\w./-]+\.\w+)", text))
    assert {"etc/cells.example.yaml", "etc/cluster.yaml", "teiresias/data/yarn-gput10000.csv", "docs/admin.md"} <= named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"README names files that are not shipped: {missing}"


def test_philly_samples_are_shipped_with_attribution() -> None:
    from teiresias.data import PHILLY_SAMPLES, PHILLY_SAMPLES_1000
    from teiresias.policy.gittins import ServiceDistribution

    for path, n in ((PHILLY_SAMPLES, 9999), (PHILLY_SAMPLES_1000, 1001)):
        dist = ServiceDistribution.from_samples_file(path)
        assert len(dist.samples) == n
    attribution = (PHILLY_SAMPLES.parent / "ATTRIBUTION.txt").read_text(encoding="utf-8")
    assert "SymbioticLab/Tiresias" in attribution and "Apache License 2.0" in attribution
    # Installed as package data: setuptools takes *.csv and *.txt from every package.
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    assert {"*.csv", "*.txt"} <= set(patterns)


def test_synth_for_the_example_cluster_chains_into_simulate(tmp_path: Path) -> None:
    """The first two simulate commands of the README, in process: the testbed
    mix made for etc/cluster.yaml (16 GPUs) is accepted by simulate there."""
    run = CliRunner().invoke
    trace = tmp_path / "testbed.csv"
    r = run(cli, ["trace", "synth", "-c", str(ROOT / "etc/cluster.yaml"), "-o", str(trace), "--json"])
    assert r.exit_code == 0, r.output
    assert max(int(k) for k in __import__("json").loads(r.output.splitlines()[-1])["gpus"]) == 16
    r = run(cli, ["simulate", "-t", str(trace), "-c", str(ROOT / "etc/cluster.yaml"), "-p", "las,fifo"])
    assert r.exit_code == 0, r.output
    assert "480" in r.output


def test_testbed_cap_changes_only_the_sizes_above_it() -> None:
    from teiresias.simulator.synth import testbed_mix

    full, capped = testbed_mix(seed=3), testbed_mix(seed=3, max_gpus=16)
    assert len(full) == len(capped) == 480
    for a, b in zip(full, capped):
        assert b.num_gpus == min(a.num_gpus, 16)
        assert (a.submit_time, a.duration, a.model_name) == (b.submit_time, b.duration, b.model_name)


def test_uncapped_trace_on_a_small_cluster_says_how_to_make_one_that_fits(tmp_path: Path) -> None:
    run = CliRunner().invoke
    trace = tmp_path / "t.csv"
    assert run(cli, ["trace", "synth", "-o", str(trace)]).exit_code == 0
    r = run(cli, ["simulate", "-t", str(trace), "-c", str(ROOT / "etc/cluster.yaml")])
    assert r.exit_code == 2 and "teiresias trace synth --cluster SPEC" in r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("block", range(1, 3))
def test_blocks_are_plain_shell(block: int) -> None:
    """Every block line parses as shell words (no prompt characters, no placeholders)."""
    for cmd in bash_blocks()[block]:
        words = shlex.split(cmd, comments=True)
        assert words and not words[0].startswith("$"), cmd
        assert not re.search(r"<[A-Z_]+>|\bJOBID\b", cmd), cmd
