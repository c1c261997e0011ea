"""Workload generators (Tiresias §5.1 testbed mix, Philly-like) and `teiresias trace`."""

import json
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from teiresias.errors import ConfigError
from teiresias.simulator import synth
from teiresias.simulator.synth import MODELS, PhillyParams, parse_gpu_mix, philly_like
from teiresias.simulator.trace import read_trace

SAMPLES = [100.0 * k for k in range(1, 200)]  # GPU-seconds


def test_testbed_mix_matches_section_5_1():
    jobs = synth.testbed_mix(seed=3)
    assert len(jobs) == 480
    assert Counter(j.num_gpus for j in jobs) == {1: 240, 2: 40, 4: 80, 8: 90, 16: 25, 32: 5}
    assert Counter(j.model_name for j in jobs) == {m: 48 for m in MODELS}
    assert all(120 <= j.duration <= 7200 for j in jobs)
    # Table 3 bins: about 80% of jobs are short (< 800 s).
    short = sum(j.duration < 800 for j in jobs) / 480
    assert 0.72 < short < 0.88
    gaps = np.diff([j.submit_time for j in jobs])
    assert 25 < gaps.mean() < 35 and (gaps >= 0).all()  # Poisson, mean 30 s


def test_generators_are_seeded():
    assert synth.testbed_mix(seed=1) == synth.testbed_mix(seed=1) != synth.testbed_mix(seed=2)
    p = PhillyParams(num_jobs=300, cluster_gpus=64, load=0.8)
    assert philly_like(SAMPLES, p, seed=5) == philly_like(SAMPLES, p, seed=5)


def test_philly_like_hits_the_target_load():
    p = PhillyParams(num_jobs=3000, cluster_gpus=64, load=0.8, max_gpus=16)
    jobs = philly_like(SAMPLES, p, seed=0)
    assert len(jobs) == 3000 and max(j.num_gpus for j in jobs) <= 16
    gpu_seconds = sum(j.num_gpus * j.duration for j in jobs)
    span = jobs[-1].submit_time - jobs[0].submit_time
    assert gpu_seconds / (span * 64) == pytest.approx(0.8, rel=0.1)
    assert all(j.duration >= 60 for j in jobs)  # min_duration floor


def test_philly_like_rejects_impossible_parameters():
    with pytest.raises(ConfigError, match="number of jobs"):
        philly_like(SAMPLES, PhillyParams(num_jobs=0, cluster_gpus=8))
    with pytest.raises(ConfigError, match="no GPU size"):
        philly_like(SAMPLES, PhillyParams(num_jobs=5, cluster_gpus=8, gpu_mix={16: 1.0}))
    with pytest.raises(ConfigError, match="GPUS:WEIGHT"):
        parse_gpu_mix("1-240")


def test_synth_cli_writes_a_readable_trace(tmp_path):
    samples = tmp_path / "gput.csv"
    samples.write_text("duration\n" + "\n".join(str(s) for s in SAMPLES) + "\n")
    out = tmp_path / "p.csv"
    r = CliRunner().invoke(
        cli,
        [
            "trace",
            "synth",
            "--kind",
            "philly",
            "-n",
            "50",
            "-S",
            str(samples),
            "-G",
            "32",
            "--load",
            "1.2",
            "--gpu-mix",
            "1:3,2:1,8:1",
            "-s",
            "4",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["jobs"] == 50 and set(info["gpus"]) <= {"1", "2", "8"}
    jobs = read_trace(out)
    assert len(jobs) == 50
    r2 = CliRunner().invoke(cli, ["trace", "check", str(out), "--json"])
    assert r2.exit_code == 0 and json.loads(r2.stdout)["jobs"] == 50


def test_synth_cli_testbed_is_byte_for_byte_reproducible(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for p in (a, b):
        assert CliRunner().invoke(cli, ["trace", "synth", "--kind", "testbed", "-s", "7", "-o", str(p)]).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_text().splitlines()[0] == "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"


def test_synth_cli_bad_input_exit_2(tmp_path):
    r = CliRunner().invoke(cli, ["trace", "synth", "--kind", "philly", "-o", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "needs --samples" in r.output and not (tmp_path / "x.csv").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,num_gpu\n")
    r = CliRunner().invoke(cli, ["trace", "check", str(bad)])
    assert r.exit_code == 2 and f"{bad}:1: missing column" in r.output


def test_teams_like_merges_teams_of_their_own_sizes_in_bursts():
    """trace synth --kind teams: the jobs asked for, in submit order, ids 0.., each team an
    account with its own GPU mix, arrivals at the asked load, the same trace for the same seed."""
    from teiresias.simulator.synth import TeamsParams, teams_like

    samples = np.geomspace(100, 1e6, 400).tolist()
    params = TeamsParams(num_jobs=600, cluster_gpus=64, load=2.0, num_teams=5, max_duration=86400.0)
    jobs = teams_like(samples, params, seed=4)
    assert len(jobs) == 600 and [j.job_id for j in jobs] == list(range(600))
    assert all(a.submit_time <= b.submit_time for a, b in zip(jobs, jobs[1:]))
    assert {j.account for j in jobs} <= {f"team{t}" for t in range(5)} and len({j.account for j in jobs}) > 1
    offered = sum(j.num_gpus * j.duration for j in jobs) / (64 * jobs[-1].submit_time)
    assert 1.6 < offered < 2.6  # the span is drawn to meet the load (bursts end a little early)
    # teams differ in their GPU sizes (each skews the site's mix)
    mixes = [np.mean([j.num_gpus for j in jobs if j.account == f"team{t}"] or [0]) for t in range(5)]
    assert max(mixes) > 1.5 * min(m for m in mixes if m)
    assert teams_like(samples, params, seed=4) == jobs
    with pytest.raises(ConfigError, match="mean burst size must be >= 1 job"):
        teams_like(samples, TeamsParams(10, 8, 1.0, burst_mean=0.5))
