"""The time limit every Slurm job declares, as information (docs/simulator.md "Time limits",
docs/policies.md "Time limits"): the trace column, ``trace synth --time-limits``, ``from-sacct``'s
``TimelimitRaw``, the controller's Slurm TimeLimit, and gittins' distribution truncated at
each job's limit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurm_plugin.controller.reconcile import to_policy_job
from slurm_plugin.controller.state import JobRecord
from teiresias.cli import cli
from teiresias.domain import JobState
from teiresias.errors import ConfigError, TraceError
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.policy.testing import cluster, pending, running, snap
from teiresias.simulator.sacct import parse_sacct
from teiresias.simulator.synth import COMMON_LIMITS, LimitParams, PhillyParams, philly_like, with_time_limits
from teiresias.simulator.trace import TraceJob, read_trace, write_trace

D = ServiceDistribution([10.0, 20.0, 30.0, 40.0])
INF = math.inf


# -- the truncated index ---------------------------------------------------------------------


def test_a_bound_truncates_the_distribution() -> None:
    """Bound 25 leaves the samples 10 and 20: E[S] = 15, so G(0, inf) = 1/15 (1/25 unbounded);
    with a quantum of 15, one of two finishes within it and the expected time spent is
    (10 + 15) / 2, so G = 1/25."""
    assert D.indices([0.0], [INF], [25.0])[0] == pytest.approx(1 / 15)
    assert D.indices([0.0], [INF])[0] == pytest.approx(1 / 25)
    assert D.indices([0.0], [15.0], [25.0])[0] == pytest.approx(1 / 25)
    assert D.finish_probabilities([0.0], [15.0], [25.0])[0] == pytest.approx(0.5)
    assert D.residual_indices([0.0], None, [25.0])[0] == pytest.approx(1 / 15)


def test_no_bound_is_todays_index_exactly() -> None:
    a, d = [0.0, 5.0, 12.0, 33.0, 50.0], [15.0, INF, 3.0, 10.0, INF]
    assert D.indices(a, d, [INF] * 5).tolist() == D.indices(a, d).tolist()
    assert D.finish_probabilities(a, d, [INF] * 5).tolist() == D.finish_probabilities(a, d).tolist()
    assert D.residual_indices(a, 2, [INF] * 5).tolist() == D.residual_indices(a, 2).tolist()


def test_a_job_past_every_sample_below_its_bound_is_nearly_done() -> None:
    """At 22 GPU-s with a bound of 25 no sample is left: the job ends within 3 GPU-s, so its
    index is 1/3 where the quantum covers that, 0 where it does not; at or past the bound, 1."""
    assert D.indices([22.0, 22.0, 30.0], [INF, 2.0, INF], [25.0, 25.0, 25.0]).tolist() == pytest.approx(
        [1 / 3, 0.0, 1.0]
    )
    assert D.finish_probabilities([22.0, 22.0], [5.0, 2.0], [25.0, 25.0]).tolist() == [1.0, 0.0]


def _gittins(**kw):
    params = {"queues": (100.0,), "distribution": ServiceDistribution(np.geomspace(10, 1e5, 200)), **kw}
    return build_policy("gittins", PolicyParams(**params))


def test_of_two_fresh_jobs_the_one_with_the_short_limit_goes_first() -> None:
    """Same size, same submit time: blind, the job id decides; with limits, the job that
    declared 1 minute (at most 60 GPU-s) goes before the one that declared a day."""
    long, short = pending(1, 1, time_limit=86400.0), pending(2, 1, time_limit=60.0)
    c = cluster(1, 1)
    assert _gittins().decide(snap(c, long, short)).order == (2, 1)
    assert _gittins(time_limits=False).decide(snap(c, long, short)).order == (1, 2)


def test_in_the_indexed_last_queue_a_job_near_its_limit_goes_first() -> None:
    """Two waiting last-queue jobs at 500 GPU-s: the one 20 GPU-s from its limit is ahead."""
    far = pending(1, 1, first_start_time=0.0, executed_time=500.0)
    near = pending(2, 1, first_start_time=5.0, executed_time=500.0, time_limit=520.0)
    plan = _gittins(last_queue="gittins").decide(snap(cluster(1, 1), far, near, now=1000.0))
    assert plan.order == (2, 1) and set(plan.start) == {2}


def test_limits_at_the_largest_sample_change_nothing() -> None:
    """A bound above every sample truncates nothing: the same plan as without limits."""
    dist = ServiceDistribution(np.geomspace(10, 1e5, 200))
    jobs = [pending(i, 1 + i % 2, first_start_time=float(i), executed_time=37.0 * i) for i in range(8)]
    limited = [
        pending(i, j.num_gpus, first_start_time=j.first_start_time, executed_time=j.executed_time, time_limit=1e6)
        for i, j in enumerate(jobs)
    ]
    for lq in ("fifo", "gittins"):
        pol = build_policy("gittins", PolicyParams(queues=(100.0,), distribution=dist, last_queue=lq))
        a, b = pol.decide(snap(cluster(1, 4), *jobs, now=500.0)), pol.decide(snap(cluster(1, 4), *limited, now=500.0))
        assert (a.order, a.start, a.index) == (b.order, b.start, b.index)


# -- traces ------------------------------------------------------------------------------------


def test_the_column_is_written_and_read_back(tmp_path: Path) -> None:
    jobs = [TraceJob(0, 1, 0.0, 100.0, time_limit=3600.0), TraceJob(1, 2, 5.0, 50.0)]
    write_trace(tmp_path / "t.csv", jobs)
    text = (tmp_path / "t.csv").read_text()
    assert text.splitlines()[0].endswith(",time_limit") and text.splitlines()[2].endswith(",")
    assert [j.time_limit for j in read_trace(tmp_path / "t.csv")] == [3600.0, None]
    write_trace(tmp_path / "none.csv", [TraceJob(0, 1, 0.0, 100.0)])
    assert "time_limit" not in (tmp_path / "none.csv").read_text()


@pytest.mark.parametrize(
    "cell,needle",
    [
        ("50", r"time_limit 50 is below its duration 100 \(Slurm ends a job at its limit\)"),
        ("-1", "time_limit must be"),
    ],
)
def test_a_limit_below_the_run_time_is_one_line(tmp_path: Path, cell: str, needle: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        f"job_id,num_gpu,submit_time,iterations,model_name,duration,interval,time_limit\n0,1,0,1,m,100,0,{cell}\n"
    )
    with pytest.raises(TraceError, match=needle):
        read_trace(p)


JOBS = philly_like(np.geomspace(60, 2e6, 300).tolist(), PhillyParams(400, 64, max_duration=86400.0), seed=3)


def test_limit_models() -> None:
    mx = 7 * 86400.0
    assert all(j.time_limit is None for j in with_time_limits(JOBS, LimitParams("none")))
    assert {j.time_limit for j in with_time_limits(JOBS, LimitParams("max"))} == {mx}
    exact = with_time_limits(JOBS, LimitParams("exact"))
    assert all(j.duration <= j.time_limit < j.duration + 60 and j.time_limit % 60 == 0 for j in exact)
    rounded = with_time_limits(JOBS, LimitParams("round"))
    assert all(j.time_limit in COMMON_LIMITS and j.time_limit >= j.duration for j in rounded)
    assert all(j.time_limit == 3600 for j in rounded if j.duration <= 3600)
    user = with_time_limits(JOBS, LimitParams("user", at_max=0.2), seed=1)
    assert all(j.time_limit in COMMON_LIMITS and j.time_limit >= j.duration for j in user)
    assert 0.15 < sum(j.time_limit == mx for j in user) / len(user) < 0.35
    # over-estimates: the limit is above the rounded run time for many jobs
    assert sum(u.time_limit > r.time_limit for u, r in zip(user, rounded)) > len(JOBS) / 3
    assert with_time_limits(JOBS, LimitParams("user"), seed=1) == user  # seeded
    assert [(j.job_id, j.duration) for j in user] == [(j.job_id, j.duration) for j in JOBS]


def test_bad_limit_models_are_one_line() -> None:
    with pytest.raises(ConfigError, match="time-limit model 'often'"):
        with_time_limits(JOBS, LimitParams("often"))
    with pytest.raises(ConfigError, match="longer than the maximum time limit 3600 s"):
        with_time_limits(JOBS, LimitParams("round", max_limit=3600.0))


def test_synth_writes_limits(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    args = ["trace", "synth", "-k", "philly", "-n", "50", "-S", "teiresias/data/yarn-gput1000.csv", "-G", "16"]
    r = CliRunner().invoke(cli, [*args, "--max-duration", "86400", "-T", "user", "-o", str(out)])
    assert r.exit_code == 0, r.output
    jobs = read_trace(out)
    assert all(j.time_limit is not None and j.time_limit >= j.duration for j in jobs)
    r = CliRunner().invoke(cli, [*args, "--max-duration", "0", "-T", "round", "--max-time-limit", "60", "-o", str(out)])
    assert r.exit_code == 2 and "longer than the maximum time limit 60 s" in r.output


def test_from_sacct_reads_the_limit() -> None:
    """JSON ``time.limit`` and parsable2 ``TimelimitRaw`` are minutes; UNLIMITED is none; a job
    that ran past its limit gets its run time (the trace needs limit >= duration)."""
    text = (
        "JobIDRaw|State|Submit|Start|End|Elapsed|AllocTRES|TimelimitRaw\n"
        "1|COMPLETED|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:10:00|00:10:00|gres/gpu=1|60\n"
        "2|COMPLETED|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:10:00|00:10:00|gres/gpu=1|UNLIMITED\n"
        "3|TIMEOUT|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:06:00|00:06:00|gres/gpu=1|5\n"
    )
    assert [j.time_limit for j in parse_sacct(text, "s.txt").jobs] == [3600.0, None, 360.0]
    job = {
        "job_id": 7,
        "state": {"current": "COMPLETED"},
        "time": {"submission": 100, "start": 100, "end": 700, "elapsed": 600, "limit": 120},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]},
    }
    newer = json.loads(json.dumps(job))
    newer["time"]["limit"] = {"set": True, "infinite": False, "number": 120}
    unlimited = json.loads(json.dumps(job))
    unlimited["time"]["limit"] = {"set": True, "infinite": True, "number": 0}
    for j, want in ((job, 7200.0), (newer, 7200.0), (unlimited, None)):
        assert parse_sacct(json.dumps({"jobs": [j]}), "s.json").jobs[0].time_limit == want


def test_the_controller_hands_the_policy_slurms_limit_and_state_times() -> None:
    rec = JobRecord(job_id=5, gpus=2, submit_time=10.0, first_start_time=20.0, run_start=50.0, phase_since=40.0)
    run = to_policy_job(rec, 100.0, JobState.RUNNING, None, time_limit_minutes=90)
    assert run.time_limit == 5400.0 and run.state_since == 50.0
    wait = to_policy_job(rec, 100.0, JobState.PENDING, None, time_limit_minutes=None)
    assert wait.time_limit is None and wait.state_since == 40.0
    fresh = to_policy_job(JobRecord(job_id=6, gpus=1, phase_since=3.0), 100.0, JobState.PENDING, None)
    assert fresh.state_since is None


def test_running_jobs_keep_their_limit_in_the_simulator() -> None:
    """The simulator hands each job its trace limit (SimJob), running or not."""
    from teiresias.simulator import SimulationOptions, Simulator

    # Two jobs run on the two GPUs when a third arrives: that round sees both running.
    trace = [TraceJob(0, 1, 0.0, 100.0, time_limit=3600.0), TraceJob(1, 1, 0.0, 50.0), TraceJob(2, 1, 10.0, 5.0)]
    seen: list[tuple[int, float | None]] = []
    pol = build_policy("gittins", PolicyParams(queues=(100.0,), distribution=D))
    decide = pol.decide

    def spy(s):
        seen.extend((j.job_id, j.time_limit) for j in s.jobs if j.state is JobState.RUNNING)
        return decide(s)

    pol.decide = spy  # type: ignore[method-assign]
    opt = SimulationOptions(interval=10.0, progress=False, prune_rounds=False)  # every round sees every job
    Simulator(trace, cluster(1, 2), pol, opt).run()
    assert (0, 3600.0) in seen and (1, None) in seen
    assert all(lim == (3600.0 if jid == 0 else None) for jid, lim in seen)


def test_a_running_job_near_its_limit_is_not_preempted_for_a_fresh_look_alike() -> None:
    """Last queue by index: a running job 10 GPU-s from its limit outranks a waiting one."""
    near = running(1, 1, {"s0n0": 1}, first_start_time=0.0, executed_time=990.0, time_limit=1000.0)
    other = pending(2, 1, first_start_time=1.0, executed_time=200.0)
    plan = _gittins(last_queue="gittins").decide(snap(cluster(1, 1), near, other, now=2000.0))
    assert plan.preempt == () and plan.order[0] == 1


def test_limits_all_at_a_seven_day_maximum_replay_as_no_limits() -> None:
    """Useless limits (every job at the partition's 7-day maximum) change no decision: on the
    Philly samples' 16-point grid, a 7-day bound lies past the last point even for one GPU."""
    from teiresias.simulator import SimulationOptions, Simulator
    from teiresias.simulator.trace import TraceJob as T

    dist = ServiceDistribution.from_samples_file("teiresias/data/yarn-gput10000.csv")
    jobs = philly_like(dist.samples, PhillyParams(60, 16, load=3.0, max_duration=86400.0), seed=5)
    capped = with_time_limits(jobs, LimitParams("max"))
    assert {j.time_limit for j in capped} == {7 * 86400.0} and isinstance(capped[0], T)
    opt = SimulationOptions(progress=False, record_timeline=False)
    pol = build_policy("gittins", PolicyParams(queues=(3600.0,), distribution=dist, last_queue="gittins"))
    a = Simulator(jobs, cluster(2, 8), pol, opt).run()
    b = Simulator(capped, cluster(2, 8), pol, opt).run()
    assert a.records == b.records and a.summary.preemptions > 0
