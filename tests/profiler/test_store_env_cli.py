"""ProfileStore, profiling_env and `teiresias profile show`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import profiler
from profiler.aggregate import Profile
from profiler.env import ProfileWindow, profiling_env
from profiler.store import ProfileStore, model_key
from teiresias.cli import cli
from teiresias.errors import ConfigError

GOOD = Profile(
    valid=True,
    layer="gloo",
    ranks=2,
    iterations=10,
    collectives_per_iteration=10,
    bytes_per_iteration=755240.0,
    model_bytes=755240.0,
    period_s=0.02,
    intensity_bps=3.7e7,
    skew=0.694,
    skew_source="traffic",
    traffic_skew=0.694,
    traffic_skew_valid=True,
)


def test_store_reuses_valid_profiles_by_model(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    key = model_key(script="train.py")
    assert key == "script:" + os.path.realpath("train.py")
    assert model_key("vgg16", "train.py") == "model:vgg16"
    assert store.get(key) is None and not store.has(key)
    store.put(key, GOOD, job_id=11)
    assert store.get(key) == GOOD and store.for_job(11) == GOOD
    # A later failed profile of the same model is kept for its job but does
    # not erase what the model's earlier run learnt.
    bad = Profile.none("rank(s) [0] stopped inside the profiling window (job killed mid-profile?)")
    store.put(key, bad, job_id=12)
    assert store.get(key) == GOOD
    assert store.for_job(12) == GOOD  # falls back to the model's profile
    assert store.key_of_job(12) == key
    assert ProfileStore(tmp_path).get(key) == GOOD  # persisted


def test_store_rejects_bad_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        model_key()
    with pytest.raises(ConfigError):
        ProfileStore(tmp_path).put("model:x", GOOD, job_id="../etc")


def test_profiling_env(tmp_path: Path) -> None:
    env = profiling_env(
        tmp_path / "job", ProfileWindow(seconds=5, iterations=20), base_env={"LD_PRELOAD": "/x/other.so"}
    )
    lib = str(profiler.library_path())
    assert env["LD_PRELOAD"] == f"{lib}:/x/other.so"
    assert env["TEIRESIAS_PROFILE_DIR"] == str((tmp_path / "job" / "profile").resolve())
    assert env["TEIRESIAS_PROFILE_SECONDS"] == "5.0" and env["TEIRESIAS_PROFILE_ITERS"] == "20"
    # Idempotent: the library is not preloaded twice.
    again = profiling_env(tmp_path / "job", base_env={"LD_PRELOAD": env["LD_PRELOAD"]})
    assert again["LD_PRELOAD"] == f"{lib}:/x/other.so"
    with pytest.raises(ConfigError):
        ProfileWindow(seconds=0)


def test_cli_show_from_store_json(tmp_path: Path) -> None:
    ProfileStore(tmp_path / "state").put("model:vgg", GOOD, job_id=42)
    res = CliRunner().invoke(cli, ["profile", "show", "42", "--store", str(tmp_path / "state"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["skew"] == pytest.approx(0.694) and data["job_id"] == "42"
    res = CliRunner().invoke(cli, ["profile", "show", "42", "-s", str(tmp_path / "state")])
    assert res.exit_code == 0 and "69.4%" in res.output and "20.0 ms" in res.output


def test_cli_show_from_job_dir_without_records(tmp_path: Path) -> None:
    (tmp_path / "7" / "profile").mkdir(parents=True)
    res = CliRunner().invoke(cli, ["profile", "show", "7", "--dir", str(tmp_path / "7")])
    assert res.exit_code == 0
    assert "no profile: no record files" in res.output and "skew (placement)  unknown" in res.output


def test_cli_store_from_controller_config(tmp_path: Path) -> None:
    # Where the controller keeps profiles: its config's profile_store.
    ProfileStore(tmp_path / "profiles").put("model:vgg", GOOD, job_id=43)
    cfg = tmp_path / "teiresias.yaml"
    cfg.write_text(f"profile_store: {tmp_path / 'profiles'}\n")
    res = CliRunner().invoke(cli, ["profile", "show", "43", "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["skew"] == pytest.approx(0.694)
    res = CliRunner().invoke(cli, ["profile", "show", "43", "--config", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and "cannot read config" in res.output


def test_cli_show_unknown_job_exits_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["profile", "show", "9", "-s", str(tmp_path / "s"), "-b", str(tmp_path / "b")])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no profile for job 9" in lines[0] and "--dir" in lines[0]
    res = CliRunner().invoke(cli, ["profile", "show", "9", "--dir", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such directory" in res.output
