"""Smallest-first and the SRTF / SRSF oracles (Tiresias §3.2.1, §5)."""

import pytest

from teiresias.errors import ConfigError
from teiresias.policy.registry import build_policy
from teiresias.policy.testing import cluster, pending, running, snap


def test_sjf_ranks_fewest_gpus_first_then_fifo() -> None:
    jobs = [pending(1, 4, submit=0.0), pending(2, 1, submit=2.0), pending(3, 1, submit=1.0)]
    assert build_policy("sjf").decide(snap(cluster(1, 8), *jobs)).order == (3, 2, 1)


def test_srtf_ranks_by_remaining_time_and_preempts() -> None:
    # Job 1 runs with 50 s left; job 2 needs only 10 s: it takes the GPU.
    long = running(1, 1, {"s0n0": 1}, duration=100.0, total_executed_time=50.0)
    short = pending(2, 1, duration=10.0)
    plan = build_policy("srtf").decide(snap(cluster(1, 1), long, short))
    assert plan.order == (2, 1) and plan.preempt == (1,) and set(plan.start) == {2}


def test_srsf_weighs_remaining_time_by_gpus() -> None:
    # Job 1: 10 s x 4 GPUs = 40; job 2: 30 s x 1 GPU = 30. SRTF says 1, SRSF says 2.
    jobs = [pending(1, 4, duration=10.0), pending(2, 1, duration=30.0)]
    s = snap(cluster(1, 4), *jobs)
    assert build_policy("srtf").decide(s).order == (1, 2)
    assert build_policy("srsf").decide(s).order == (2, 1)


def test_oracle_ties_break_by_job_id() -> None:
    jobs = [pending(2, 1, duration=5.0, submit=0.0), pending(1, 1, duration=5.0, submit=9.0)]
    assert build_policy("srsf").decide(snap(cluster(1, 2), *jobs)).order == (1, 2)


@pytest.mark.parametrize("name", ["srtf", "srsf"])
def test_oracles_refuse_jobs_without_duration(name) -> None:
    with pytest.raises(ConfigError, match="needs every job's duration"):
        build_policy(name).decide(snap(cluster(1, 1), pending(1, 1)))
