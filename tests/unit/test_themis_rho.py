"""Themis apps and finish-time fairness rho (Equation 1; docs/themis.md), hand-computed cases."""

from __future__ import annotations

import math

import pytest

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.policy.placement import ConsolidatePlacement
from teiresias.policy.themis.apps import app_of, name_prefix
from teiresias.policy.themis.policy import ThemisPolicy
from teiresias.policy.themis.rho import Topology, jain
from teiresias.simulator.metrics import JobRecord, app_rho, jain_index


def test_app_is_explicit_else_account_and_name_stem():
    assert app_of(Job(JobId(1), 1, 0.0, account="ml", model_name="x", app="search7")) == "search7"
    assert app_of(Job(JobId(1), 1, 0.0, account="ml", model_name="search-3")) == "ml/search"
    assert app_of(Job(JobId(2), 1, 0.0, account="ml", model_name="search_12")) == "ml/search"
    assert app_of(Job(JobId(3), 1, 0.0, user="bob", model_name="bigjob")) == "bob/bigjob"
    assert name_prefix("42") == "42"


def test_slowdown_by_node_rack_and_across():
    c = Cluster.from_tiresias_spec(2, 2, 4)  # racks of 8 GPUs
    t = Topology.of(c)
    assert (t.best(4), t.best(8), t.best(16)) == (1.0, 1.1, 1.3)
    assert t.of_placement(Placement.of({"s0n0": 2, "s0n1": 2}), c) == 1.1
    assert t.of_placement(Placement.of({"s0n0": 2, "s1n0": 2}), c) == 1.3


def test_rho_of_each_app_by_equation_1():
    # One node of 4 GPUs, two apps, so a 1/N share is 2 GPUs.
    c = Cluster.from_tiresias_spec(1, 1, 4)
    a = Job(
        JobId(1),
        2,
        0.0,
        account="a",
        model_name="x",
        duration=100.0,
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": 2}),
        first_start_time=0.0,
        lease_end=600.0,
    )
    b = Job(JobId(2), 1, 0.0, account="b", model_name="y", duration=200.0)
    pol = ThemisPolicy(ConsolidatePlacement(), lease=600.0)
    _, inputs, now_rho = pol.app_rhos(Snapshot(50.0, c, [a, b]))
    # a: W = 2 x 100, T_id = 200 / min(2, 2) = 100; T_sh = 50 + 200 / 2 = 150.
    assert inputs["a/x"].t_id == pytest.approx(100.0)
    assert now_rho["a/x"] == pytest.approx(1.5)
    # b: T_id = 200 / min(2, 1) = 200; no GPUs: waits a lease then its share: 50 + 600 + 200.
    assert inputs["b/y"].t_id == pytest.approx(200.0)
    assert now_rho["b/y"] == pytest.approx(850.0 / 200.0)
    plan = pol.decide(Snapshot(50.0, c, [a, b]))
    assert plan.rho[JobId(1)] == pytest.approx(1.5) and plan.rho[JobId(2)] == pytest.approx(4.25)


def test_jain_index():
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([]) == 1.0


def _rec(jid: int, app: str, gpus: int, submit: float, end: float, work: float) -> JobRecord:
    return JobRecord(
        job_id=jid,
        gpus=gpus,
        model="m",
        submit=submit,
        start=submit,
        end=end,
        jct=end - submit,
        queue_delay=0.0,
        preemptions=0,
        overhead=0.0,
        slowed=False,
        nodes=(),
        app=app,
        work=work,
    )


def test_reported_rho_uses_the_average_contention_over_the_apps_lifetime():
    # 4 GPUs. App a: one 4-GPU job of 100 s, alone over [0, 100) then with b over [100, 300).
    # N_avg(a) over [0, 300) = (100 x 1 + 200 x 2) / 300 = 5/3; T_id = 400 / min(4 / (5/3), 4) = 166.7.
    recs = [_rec(1, "a", 4, 0.0, 300.0, 100.0), _rec(2, "b", 2, 100.0, 300.0, 200.0)]
    rho = app_rho(recs, 4)
    assert rho["a"] == pytest.approx(300.0 / (400.0 / (4 / (5 / 3))))
    # b: alive [100, 300) with a throughout: N_avg = 2, T_id = 400 / min(2, 2) = 200 = its T_sh.
    assert rho["b"] == pytest.approx(1.0)
    # Never below its own longest job: a lone 1-GPU job of 100 s on 4 GPUs has rho 1, not 0.25.
    assert app_rho([_rec(3, "c", 1, 0.0, 100.0, 100.0)], 4)["c"] == pytest.approx(1.0)
    assert not math.isnan(app_rho(recs, 4)["a"])


def test_slowdown_scales_with_profiled_skew():
    # docs/themis.md: the paper's excess over 1 times skew / 0.5; unknown skew keeps the paper's values.
    c = Cluster.from_tiresias_spec(2, 2, 4)  # racks of 8 GPUs
    t = Topology.of(c)
    assert t.best(16, None) == 1.3 and t.best(16, 0.5) == pytest.approx(1.3)
    assert t.best(8, 0.1) == pytest.approx(1.02) and t.best(16, 0.1) == pytest.approx(1.06)
    assert t.best(8, 1.0) == pytest.approx(1.2) and t.best(16, 1.0) == pytest.approx(1.6)
    assert t.best(4, 1.0) == 1.0  # one node: no network, whatever the skew
    spread = Placement.of({"s0n0": 2, "s1n0": 2})
    assert t.of_placement(spread, c, 0.05) == pytest.approx(1.03)
    # The app's rho sees it: the same spread 16-GPU job costs a low-skew app less than a high-skew one.
    jobs = {s: Job(JobId(1), 16, 0.0, account="a", model_name="x", duration=100.0, skew=s) for s in (0.1, 1.0)}
    pol = ThemisPolicy(ConsolidatePlacement(), lease=600.0)
    s_best = {s: pol.app_rhos(Snapshot(0.0, c, [j]))[1]["a/x"].s_best for s, j in jobs.items()}
    assert s_best[0.1] == pytest.approx(1.06) and s_best[1.0] == pytest.approx(1.6)


def test_an_app_finishes_no_sooner_than_its_slowest_job():
    """Themis §4.3.2-§4.3.3: T_sh is when the app's last job finishes, each job's speed-up
    capped by its own GPUs. An app running its one long 1-GPU job, with a 60-s 8-GPU job waiting,
    is not unfair: alone on its share it could not end before that long job either."""
    c = Cluster.from_tiresias_spec(1, 2, 8)  # 16 GPUs, two apps: a share of 8
    long = Job(
        JobId(1),
        1,
        0.0,
        account="a",
        model_name="x",
        duration=10_000.0,
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": 1}),
        first_start_time=0.0,
        executed_time=1000.0,
        total_executed_time=1000.0,
        lease_end=5000.0,
    )
    short = Job(JobId(2), 8, 0.0, account="a", model_name="x", duration=60.0)
    other = Job(JobId(3), 1, 0.0, account="b", model_name="y", duration=100.0)
    _, inputs, now_rho = ThemisPolicy(ConsolidatePlacement()).app_rhos(Snapshot(1000.0, c, [long, short, other]))
    a = inputs["a/x"]
    # T_id = max(10,480 GPU-s / min(8, 9), the long job's 10,000 s) = 10,000 (W / share alone: 1,310).
    assert a.t_id == pytest.approx(10_000.0)
    # T_sh on its 1 GPU = 1,000 + max(9,480 / 1, 9,000) = 10,480; with its 9 GPUs the long job still
    # has 9,000 s to go.
    assert now_rho["a/x"] == pytest.approx(1.048)
    assert a.rho(9) == pytest.approx((1000.0 + 9000.0) / 10_000.0)
