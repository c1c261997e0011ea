"""Queue thresholds fitted to the GPU-time distribution (policy.queues: auto, --queues auto):
the model's arithmetic by hand, the fit's choice, and its effect on real replays."""

import itertools
import random

import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from teiresias.domain import Cluster
from teiresias.errors import ConfigError
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.thresholds import _Moments, _score, expected_jct, fit_thresholds
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.synth import PhillyParams, philly_like
from tests.conftest import REPO

PHILLY = REPO / "teiresias" / "data" / "yarn-gput10000.csv"


def test_one_queue_is_the_m_g_1_fcfs_time_and_a_threshold_follows_the_formula():
    d = ServiceDistribution([1.0, 3.0])  # E[S] = 2, E[S^2] = 5; load 0.5 -> lambda = 1/4
    # FCFS: W = lambda E[S^2] / (2 (1 - rho)) = 1.25; T = W + E[S] = 3.25.
    assert expected_jct(d, (), 0.5) == pytest.approx(3.25)
    assert expected_jct(d, (3.0,), 0.5) == pytest.approx(3.25)  # nobody goes past 3
    # Threshold 1: size-1 jobs: W(1) = (1/4)(1) / (2 (3/4)) = 1/6, T = 7/6.
    # Size-3 jobs: (W(inf) + 3) / (1 - rho(1)) = (1.25 + 3) / 0.75.
    assert expected_jct(d, (1.0,), 0.5) == pytest.approx(0.5 * 7 / 6 + 0.5 * (1.25 + 3) / 0.75)


def test_the_fit_is_the_best_candidate_and_keeps_one_queue_for_similar_jobs():
    # Low variance: splitting only makes long jobs wait behind short ones' arrivals.
    assert fit_thresholds(ServiceDistribution([10.0, 11.0, 12.0] * 20), max_queues=3).thresholds == (12.0,)
    d = ServiceDistribution(random.Random(1).sample(ServiceDistribution.from_samples_file(PHILLY).samples, 2000))
    fit = fit_thresholds(d, max_queues=3, grid=12)
    m = _Moments(d)
    qs = sorted({m.s[min(m.n - 1, int(m.n * (k + 1) / 13))] for k in range(12)} - {m.s[-1]})
    every = [c for k in range(3) for c in itertools.combinations(qs, k)]
    assert fit.expected_jct == pytest.approx(min(_score(m, c, 0.95) for c in every))
    assert fit.expected_jct < fit.paper_expected_jct
    assert fit_thresholds(d, max_queues=3, grid=12) == fit  # deterministic
    with pytest.raises(ConfigError, match="load 1.5"):
        fit_thresholds(d, load=1.5)


def test_fitted_thresholds_beat_the_papers_hour_for_las_on_an_overloaded_replay():
    samples = list(ServiceDistribution.from_samples_file(PHILLY).samples)
    random.Random(0).shuffle(samples)
    history = ServiceDistribution(samples[5000:])  # held out from the trace's draws
    cluster = Cluster.from_tiresias_spec(1, 12, 8)
    trace = philly_like(samples[:5000], PhillyParams(num_jobs=600, cluster_gpus=96, load=2.0, max_duration=86400.0))
    opt = SimulationOptions(progress=False, record_timeline=False)
    paper = Simulator(trace, cluster, build_policy("las"), opt).run().summary
    fitted = fit_thresholds(history).thresholds
    auto = Simulator(trace, cluster, build_policy("las", PolicyParams(queues=fitted)), opt).run().summary
    assert auto.avg_jct < 0.9 * paper.avg_jct, (fitted, auto.avg_jct, paper.avg_jct)


def test_queues_auto_through_simulate(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        + "".join(f"{i},{1 + i % 4},{i * 30},10,resnet50,{100 + 997 * (i % 7) ** 3},30\n" for i in range(40))
    )
    base = ["simulate", "-t", str(trace), "-c", str(REPO / "etc" / "cluster.yaml"), "-p", "las", "--queues", "auto"]
    r = CliRunner().invoke(cli, base)
    assert (
        r.exit_code == 2 and "--queues auto fits the thresholds" in r.output and len(r.output.strip().splitlines()) == 1
    )
    r = CliRunner().invoke(cli, [*base, "-g", str(PHILLY)])
    assert r.exit_code == 0, r.output
    assert "--queues auto: " in r.output and "fitted to 9999 GPU-time samples" in r.output
