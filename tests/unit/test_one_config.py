"""One configuration file for every command (issue 21 item 3, docs/admin.md step
4): `$TEIRESIAS_CONFIG`, else /etc/teiresias/teiresias.yaml, whatever the
folder a user runs them from. Before, the admin guide installed
/etc/teiresias/teiresias.yaml, tsbatch read /etc/teiresias.yaml, and queue and
explain defaulted to ./etc/teiresias.yaml, which failed from a user's home."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from profiler.aggregate import Profile
from profiler.store import ProfileStore, model_key
from teiresias import jobfiles
from teiresias.cli import cli
from tests.conftest import REPO
from wrappers import tsbatch
from wrappers.profiling import store_root
from wrappers.sbatch_args import parse

DEFAULT = "/etc/teiresias/teiresias.yaml"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user's home, far from any clone, as the working folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEIRESIAS_CONFIG", raising=False)
    monkeypatch.delenv("TEIRESIAS_CELLS", raising=False)
    monkeypatch.delenv("TEIRESIAS_PROFILE_STORE", raising=False)
    return tmp_path


def site_config(home: Path, **extra) -> Path:
    cfg = {
        "state_db": str(home / "site" / "state.db"),
        "audit_log": str(home / "site" / "audit.jsonl"),
        "profile_store": str(home / "profiles"),
        "spool_dir": str(home / "spool"),
        "cells": str(REPO / "etc" / "cells.example.yaml"),
        **extra,
    }
    path = home / "teiresias.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.skipif(Path(DEFAULT).exists(), reason="this machine has a site config at the default path")
def test_without_the_variable_every_command_reads_the_one_default_path(home):
    for args in (["queue"], ["explain", "5"], ["controller", "run", "--once"]):
        r = run(*args)
        assert r.exit_code == 2 and DEFAULT in r.output, (args, r.output)
    assert jobfiles.config_path({}) == Path(DEFAULT)
    assert tsbatch._setup(parse(["--wrap", "true"]), {}).spool == ""  # no site config: no spool
    assert store_root({}) is None


def test_the_variable_names_the_file_for_every_command(home, monkeypatch):
    cfg = site_config(home)
    monkeypatch.setenv("TEIRESIAS_CONFIG", str(cfg))
    # queue, explain: the state it names (none yet: item 10's line, not "permission denied")
    for args in (["queue"], ["explain", "5"]):
        r = run(*args)
        assert r.exit_code == 2 and "no controller state yet" in r.output, (args, r.output)
    # cells: the cells file it names
    r = run("cells", "--no-slurm", "--json")
    assert r.exit_code == 0 and '"config": "' + str(REPO / "etc" / "cells.example.yaml") in r.output, r.output
    # profile: the store it names
    ProfileStore(home / "profiles").put(model_key("m"), Profile(valid=True, skew=0.3, skew_source="traffic"), 77)
    r = run("profile", "show", "77")
    assert r.exit_code == 0 and "store" in r.output, r.output
    # tsbatch: the spool and the profile store it names
    env = {"TEIRESIAS_CONFIG": str(cfg)}
    assert tsbatch._setup(parse(["--wrap", "true"]), env).spool == str(home / "spool")
    assert store_root(env) == home / "profiles"
    # the controller: a key it refuses is named with that file
    bad = site_config(home, bogus=1)
    r = run("controller", "run", "--once")
    assert r.exit_code == 2 and f"{bad}: unknown key 'bogus'" in r.output, r.output


def test_queue_before_any_controller_ran_says_so(home):
    """Issue 21 item 10: the state's folder does not exist yet: no controller ran,
    which is not a permission problem."""
    cfg = home / "c.yaml"
    cfg.write_text(yaml.safe_dump({"state_db": str(home / "never" / "state.db")}))
    for args in (["queue", "-c", str(cfg)], ["explain", "-c", str(cfg), "5"]):
        r = run(*args)
        assert r.exit_code == 2 and "no controller state yet" in r.output and "permission" not in r.output, r.output
