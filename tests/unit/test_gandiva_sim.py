"""Gandiva's mechanisms in the simulator, each shown by its effect on a small replay."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster, Node
from teiresias.policy.gandiva import GandivaParams
from teiresias.policy.registry import PolicyParams, build_policy
from teiresias.simulator.engine import SimulationOptions, Simulator
from teiresias.simulator.metrics import SimulationResult
from teiresias.simulator.slowdown import ModelProfile, SlowdownTable
from teiresias.simulator.trace import TraceJob
from tests.unit.test_policy_contract import check_plan

# Gandiva Table 1: a light model (VAE, 8.7% GPU utilisation) and a heavy one (LSTM, 87.2%).
TABLE = SlowdownTable(
    models={
        "vae": ModelProfile(None, 1.0, 8.7),
        "lstm": ModelProfile(None, 1.0, 87.2),
        "vgg16": ModelProfile(0.743, 1.64),
    }
)


def run(
    trace: list[TraceJob], cluster: Cluster, policy: str = "gandiva", placement: str = "consolidate", **opt: object
) -> SimulationResult:
    gp = {k: opt.pop(k) for k in list(opt) if k in GandivaParams.__dataclass_fields__}
    params = PolicyParams(placement=placement, gandiva=GandivaParams(**gp))  # type: ignore[arg-type]
    options = SimulationOptions(slowdown=TABLE, progress=False, **opt)  # type: ignore[arg-type]
    return Simulator(trace, cluster, build_policy(policy, params), options).run()


def one_gpu() -> Cluster:
    return Cluster.from_tiresias_spec(1, 1, 1)


def ends(r: SimulationResult) -> dict[int, float]:
    return {rec.job_id: rec.end for rec in r.records}


def test_time_slicing_alternates_two_jobs_on_one_gpu_and_gives_early_feedback() -> None:
    trace = [TraceJob(i, 1, 0.0, 1000.0, "lstm") for i in range(2)]
    fifo = run(trace, one_gpu(), "fifo", feedback=120.0)
    sliced = run(trace, one_gpu(), slice=100.0, feedback=120.0)
    assert ends(fifo) == {0: 1000.0, 1: 2000.0}
    # Both run in alternating 100 s slices, the newcomer first: a suspended job makes no
    # progress, so each needs 1000 s of turns and both end near 2000 s.
    assert ends(sliced) == pytest.approx({0: 2000.0, 1: 1900.0})
    assert sliced.summary.suspensions == 19 and sliced.summary.max_height == 2
    assert [r.slices for r in sliced.records] == [10, 9]
    # Job 1 has its first 120 s of work at 220 s instead of 1120 s; job 0 pays 200 s for it.
    assert [r.feedback for r in sliced.records] == pytest.approx([320.0, 220.0])
    assert [r.feedback for r in fifo.records] == pytest.approx([120.0, 1120.0])
    # The suspended job holds its GPU: as allocated, the cluster is always busy; as work, too.
    assert sliced.summary.gpu_utilization == pytest.approx(1.0)


def test_a_light_pair_is_packed_and_both_progress_at_once() -> None:
    trace = [TraceJob(i, 1, 0.0, 1000.0, "vae") for i in range(2)]
    r = run(trace, one_gpu())
    assert r.summary.packs == 2 and r.summary.unpacks == 0
    # Packed from 60 s on (after the newcomer's first slice), each at 0.85 of its speed.
    assert max(ends(r).values()) < 1300.0 and r.summary.useful_utilization > 1.5
    assert run(trace, one_gpu(), packing=False).summary.packs == 0


def test_a_pair_of_unknown_utilisation_is_not_packed_blind() -> None:
    # Issue 22 item 8: with unknown utilisation the old policy tried a packing that was
    # undone after one slice, again and again on a trace (54 packs, 52 unpacks). Gandiva
    # packs by introspection (§4.2.2: utilisation measured first): nothing to go on, no pack.
    trace = [TraceJob(i, 1, 0.0, 1000.0, "unprofiled") for i in range(2)]
    r = run(trace, one_gpu(), slice=100.0)
    assert r.summary.packs == 0 and r.summary.unpacks == 0
    assert ends(r) == pytest.approx({0: 2000.0, 1: 1900.0})  # plain time-slicing, nothing lost


def test_a_suspended_job_migrates_to_a_gpu_that_frees_up_at_a_cost() -> None:
    c = Cluster.from_tiresias_spec(1, 2, 1)
    trace = [
        TraceJob(0, 1, 0.0, 3000.0, "lstm"),
        TraceJob(1, 1, 0.0, 300.0, "lstm"),
        TraceJob(2, 1, 10.0, 1000.0, "lstm"),
    ]
    moved = run(trace, c, migration_cost=0.0, slice=60.0)
    cost = run(trace, c, migration_cost=50.0, slice=60.0)
    stay = run(trace, c, migration=False, slice=60.0)
    assert moved.summary.migrations == 1 and stay.summary.migrations == 0
    # Job 2 time-slices with job 0 until job 1 frees s0n1 at 300 s; then the suspended one
    # (job 0) moves there and both run alone: 3170 / 1130 s instead of 4000 / 1970 s.
    assert [r.migrations for r in moved.records] == [1, 0, 0]
    assert ends(moved) == pytest.approx({0: 3170.0, 1: 300.0, 2: 1130.0})
    assert ends(stay) == pytest.approx({0: 4000.0, 1: 300.0, 2: 1970.0})
    assert ends(cost)[0] == pytest.approx(3170.0 + 50.0)  # the migration's cost, paid by the mover


def test_a_spread_job_is_consolidated_when_a_node_frees_up() -> None:
    # Nodes a, b with 2 GPUs, c with 4; job 0 holds c for 300 s, job 1 (vgg16, 1.64x slower
    # when spread) gets a + b, then moves to c when it frees.
    c = Cluster((Node("a", "s0", 2), Node("b", "s0", 2), Node("c", "s0", 4)))
    trace = [TraceJob(0, 4, 0.0, 300.0, "lstm"), TraceJob(1, 4, 0.0, 3000.0, "vgg16")]
    moved = run(trace, c, placement="spread", migration_cost=10.0)
    stay = run(trace, c, placement="spread", migration=False)
    assert ends(stay)[1] == pytest.approx(3000.0 * 1.64)
    assert moved.records[1].nodes == ("c",) and moved.summary.migrations == 1
    assert ends(moved)[1] == pytest.approx(300.0 + 10.0 + 3000.0 - 300.0 / 1.64)


def test_an_elastic_job_grows_after_the_idle_period_and_shrinks_for_a_newcomer() -> None:
    c = Cluster.from_tiresias_spec(1, 1, 4)
    trace = [TraceJob(0, 1, 0.0, 20000.0, "lstm", elastic="1-4"), TraceJob(1, 2, 2000.0, 500.0, "lstm")]
    r = run(trace, c, idle_period=300.0, migration_cost=0.0)
    fixed = run(trace, c, grow_shrink=False)
    # Grown to 4 GPUs at 300 s, shrunk to 2 when job 1 arrives at 2000 s (which starts at
    # once), grown again 300 s after job 1 left at 2500 s. Work by then: 300 + 1700 x 4
    # + 800 x 2 = 8700 s; the rest at 4 GPUs: done at 2800 + 11300 / 4.
    assert r.summary.resizes == 3 and fixed.summary.resizes == 0
    assert ends(r) == pytest.approx({0: 2800.0 + 11300.0 / 4, 1: 2500.0})
    assert ends(fixed) == pytest.approx({0: 20000.0, 1: 2500.0})


def test_simulate_cli_gandiva_knobs_and_new_metrics_for_every_policy(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from teiresias.cli import cli

    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,0,lstm,1000,0\n1,1,0,0,lstm,1000,0\n"
    )
    spec = tmp_path / "c.csv"
    spec.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,1,1,8,64\n")
    out = tmp_path / "s.json"
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            "-t",
            str(trace),
            "-c",
            str(spec),
            "-p",
            "fifo,gandiva",
            "--slice",
            "100",
            "--no-pack",
            "--migration-cost",
            "5",
            "--feedback",
            "120",
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "avg feedback" in r.output and "max height" in r.output
    got = {s["policy"]: s for s in json.loads(out.read_text())}
    assert got["fifo"]["avg_feedback"] == 620.0 and got["gandiva"]["avg_feedback"] == 270.0
    assert got["gandiva"]["suspensions"] == 19 and got["fifo"]["max_height"] == 1
    bad = CliRunner().invoke(cli, ["simulate", "-t", str(trace), "-c", str(spec), "-p", "las", "--slice", "30"])
    assert bad.exit_code == 2 and "add gandiva to --policy" in bad.output
    bad = CliRunner().invoke(cli, ["simulate", "-t", str(trace), "-c", str(spec), "-p", "gandiva", "--slice", "0"])
    assert bad.exit_code == 2 and "slice 0.0 must be a positive number of seconds" in bad.output


def test_a_watcher_stops_jobs_early_and_their_work_is_what_they_did() -> None:
    """Simulator.watch / stop_job: what the successive-halving search of bench_gandiva.py uses."""
    from teiresias.domain import JobId

    trace = [TraceJob(i, 1, 0.0, 1000.0, "lstm") for i in range(2)]
    sim = Simulator(trace, one_gpu(), build_policy("fifo"), SimulationOptions(progress=False))
    seen: list[float] = []

    def watcher(now: float) -> float:
        seen.append(now)
        if now >= 250.0 and sim.work_done(JobId(0)) is not None:
            sim.stop_job(JobId(0), now)  # job 1 takes the GPU at once
        return 250.0 if now < 250.0 else float("inf")

    sim.watch(watcher)
    r = sim.run()
    assert ends(r) == pytest.approx({0: 250.0, 1: 1250.0})
    assert {rec.job_id: rec.work for rec in r.records} == pytest.approx({0: 250.0, 1: 1000.0})
    # Called after every event (the arrivals, a tick while job 1 waits), at 250 s as asked, at the end.
    assert seen == [0.0, 60.0, 250.0, 1250.0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([1, 1, 1, 2, 4, 8]),
            st.integers(0, 400),
            st.integers(1, 900),
            st.sampled_from(["vae", "lstm", "vgg16", "other"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=14,
    ),
    placement=st.sampled_from(["consolidate", "spread"]),
    slice_len=st.sampled_from([20.0, 60.0]),
)
# Found by this test since the pools (31bdb91): a 2-GPU elastic job "grew" onto an idle GPU that
# a floater holds a shard of, which it cannot get: a resize to the size it had (engine refused).
@example(
    rows=[
        (1, 0, 1, "vae", False),
        (1, 0, 1, "vae", False),
        (1, 0, 1, "vae", False),
        (1, 142, 1, "vae", False),
        (1, 153, 575, "vae", True),
        (1, 177, 1, "vae", False),
        (1, 263, 1, "vae", True),
        (1, 318, 822, "vae", False),
        (2, 179, 61, "vae", True),
        (4, 0, 318, "vae", False),
        (4, 128, 249, "vae", False),
        (4, 291, 739, "vae", False),
    ],
    placement="consolidate",
    slice_len=20.0,
)
def test_replays_keep_the_contract_on_every_round_and_finish(rows, placement: str, slice_len: float) -> None:
    """Every snapshot a gandiva replay hands its policy (suspended, colocated, packed, elastic jobs)
    passes the policy contract's checks; every job finishes with all its work; GPUs are never
    held beyond capacity."""
    from dataclasses import fields

    from teiresias.domain import Job, Snapshot

    trace = [
        TraceJob(i, g, float(s), float(d), m, elastic=f"1-{2 * g}" if e and g <= 2 else "")
        for i, (g, s, d, m, e) in enumerate(rows)
    ]
    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    params = PolicyParams(placement=placement, gandiva=GandivaParams(slice=slice_len, idle_period=60.0))
    policy = build_policy("gandiva", params)
    seen = 0

    class Checked:
        name = "gandiva"
        slices = True  # the simulator's mechanisms, as for gandiva itself

        def __init__(self) -> None:
            self.placement = policy.placement

        def decide(self, snap: Snapshot):  # type: ignore[no-untyped-def]
            nonlocal seen
            plain = [Job(**{f.name: getattr(j, f.name) for f in fields(Job)}) for j in snap.jobs]
            check_plan(
                policy,
                Snapshot(snap.now, snap.cluster, plain, dict(snap.unavailable), dict(snap.idle_since)),
                preemptive=False,
            )
            seen += 1
            return policy.decide(snap)

        def wake_at(self, snap: Snapshot) -> float:
            return policy.wake_at(snap)

    opt = SimulationOptions(slowdown=TABLE, progress=False, interval=30.0, preempt_overhead=5.0)
    res = Simulator(trace, cluster, Checked(), opt).run()  # type: ignore[arg-type]
    assert seen > 0
    assert sorted(r.job_id for r in res.records) == list(range(len(rows)))
    assert all(r.work == pytest.approx(trace[r.job_id].duration) for r in res.records)
    assert 0.0 < res.summary.gpu_utilization <= 1.0 + 1e-9
