"""The top-level `teiresias` command: lazy subcommands and exit codes."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from teiresias import cli as cli_mod
from teiresias.errors import ConfigError


@click.command()
def _boom() -> None:
    raise ConfigError("etc/x.yaml: unknown key 'foo'; valid keys are: a, b")


@click.command()
def _ok() -> None:
    click.echo("fine")


def test_unknown_subcommand_exits_2():
    result = CliRunner().invoke(cli_mod.cli, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_teiresias_error_is_one_line_and_exit_2(monkeypatch):
    monkeypatch.setitem(cli_mod.SUBCOMMANDS, "boom", f"{__name__}:_boom")
    result = CliRunner().invoke(cli_mod.cli, ["boom"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == ["teiresias: error: etc/x.yaml: unknown key 'foo'; valid keys are: a, b"]


def test_lazy_subcommand_is_imported_on_use(monkeypatch):
    monkeypatch.setitem(cli_mod.SUBCOMMANDS, "ok", f"{__name__}:_ok")
    result = CliRunner().invoke(cli_mod.cli, ["ok"])
    assert result.exit_code == 0 and result.output == "fine\n"


def test_broken_subcommand_does_not_break_help(monkeypatch):
    monkeypatch.setitem(cli_mod.SUBCOMMANDS, "broken", "teiresias.no_such_module:cmd")
    result = CliRunner().invoke(cli_mod.cli, ["--help"])
    assert result.exit_code == 0
    assert "broken" in result.output and "unavailable" in result.output
    run = CliRunner().invoke(cli_mod.cli, ["broken"])
    assert run.exit_code != 0 and "unavailable" in run.output


@pytest.mark.parametrize("name", sorted(cli_mod.SUBCOMMANDS))
def test_every_registered_subcommand_has_help(name):
    """Each shipped subcommand imports and answers --help with an example."""
    proc = subprocess.run(
        [sys.executable, "-m", "teiresias", name, "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "Example" in proc.stdout or "example" in proc.stdout, proc.stdout
