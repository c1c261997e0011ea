"""SJF-BSBF and SJF-FFS as policies and in the simulator (docs/sjf-bsbf.md)."""

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster, Job, JobId, JobState, Placement, Snapshot
from teiresias.errors import ConfigError
from teiresias.policy.registry import SHARING_NAMES, PolicyParams, build_policy
from teiresias.policy.sjf_bsbf.model import SharingModel, SharingProfile
from teiresias.simulator.engine import SimulationOptions, run
from teiresias.simulator.sharing import load_sharing_model
from teiresias.simulator.slowdown import SlowdownTable
from teiresias.simulator.trace import TraceJob

C4 = Cluster.from_tiresias_spec(1, 1, 4)
OPT = SimulationOptions(interval=0, slowdown=SlowdownTable.none(), progress=False)


def ends(name, trace, model=None, cluster=C4):
    res = run(trace, cluster, build_policy(name, PolicyParams(sharing=model)), OPT)
    return {r.job_id: (r.start, r.end) for r in res.records}


def test_a_short_job_shares_a_long_ones_gpus_and_both_end_when_the_model_says() -> None:
    """Job 1 (4 GPUs, 1000 s) runs; job 2 (2 GPUs, 100 s) arrives at 10 s. xi = 1.5 both: shared,
    job 2 ends at 10 + 150; job 1 lost 150 * (1 - 1/1.5) = 50 s: ends at 1050. Job 3 (4 GPUs, 50 s)
    arrives at 20 while job 1 is paired: it waits, shares from 160 (75 s), job 1 ends at 1075."""
    trace = [TraceJob(1, 4, 0.0, 1000.0), TraceJob(2, 2, 10.0, 100.0), TraceJob(3, 4, 20.0, 50.0)]
    got = ends("sjf-bsbf", trace)
    assert got[2] == pytest.approx((10.0, 160.0))
    assert got[3] == pytest.approx((160.0, 235.0))
    assert got[1] == pytest.approx((0.0, 1000.0 + 50.0 + 25.0))


def test_bsbf_waits_where_sharing_hurts_and_ffs_shares_anyway() -> None:
    """xi = 3: job 1 has 50 s left when job 2 (1000 s) arrives. Shared: job 1 ends at 150, job 2 at
    150 + 1000 - 150/3 = 1100: average 625; one after the other: 50 and 1050: 550. BSBF waits."""
    model = SharingModel(default=SharingProfile(interference=3.0))
    trace = [TraceJob(1, 4, 0.0, 100.0), TraceJob(2, 4, 50.0, 1000.0)]
    got = ends("sjf-bsbf", trace, model)
    assert got[1] == pytest.approx((0.0, 100.0)) and got[2] == pytest.approx((100.0, 1100.0))
    got = ends("sjf-ffs", trace, model)
    assert got[1] == pytest.approx((0.0, 200.0)) and got[2] == pytest.approx((50.0, 1150.0))


def test_the_guest_keeps_its_sub_batch_after_the_host_ends() -> None:
    """Memory forces sub-batch 8 of 32 (4 accumulation steps); once the host is gone the guest runs
    alone at that sub-batch's speed (r(8) > 1), so it ends later than at its full batch."""
    model = SharingModel(
        profiles={
            "h": SharingProfile(batch=32, memory_gb=8.0, fixed_memory_gb=2.0),
            "g": SharingProfile(batch=32, memory_gb=6.0, fixed_memory_gb=1.0),
        },
        gpu_memory_gb=11.0,
    )
    r8 = model.profile("g").iteration_time(8)
    assert r8 > 1.0
    trace = [TraceJob(1, 1, 0.0, 100.0, "h"), TraceJob(2, 1, 1.0, 1000.0, "g")]
    c1 = Cluster.from_tiresias_spec(1, 1, 1)
    got = ends("sjf-ffs", trace, model, c1)
    # Host: 99 s left at 1 s, 148.5 s shared; the guest did 148.5 / (1.5 r8) of its work, the rest
    # alone at speed 1 / r8.
    assert got[1] == pytest.approx((0.0, 149.5))
    assert got[2] == pytest.approx((1.0, 149.5 + (1000.0 - 148.5 / (1.5 * r8)) * r8))


def test_plan_reasons_name_the_pair_numbers() -> None:
    model = SharingModel(default=SharingProfile(interference=3.0))
    host = Job(
        JobId(1),
        4,
        0.0,
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": 4}),
        duration=100.0,
        total_executed_time=50.0,
    )
    guest = Job(JobId(2), 4, 50.0, duration=1000.0)
    plan = build_policy("sjf-bsbf", PolicyParams(sharing=model)).decide(Snapshot(50.0, C4, [host, guest]))
    assert not plan.start and plan.keep == (1,)
    assert plan.reasons[2] == (
        "waits for job 1: sharing its GPUs would raise the pair's average JCT to 625 s from 550 s one after the other"
    )
    ffs = build_policy("sjf-ffs", PolicyParams(sharing=model)).decide(Snapshot(50.0, C4, [host, guest]))
    sh = ffs.sharing[2]
    assert ffs.start[2] == Placement.of({"s0n0": 4}) and sh.partner == 1
    assert (sh.sub_batch, sh.accumulation, sh.slowdown, sh.partner_slowdown) == (32, 1, 3.0, 3.0)
    # A host already paired takes no second guest (at most two jobs per GPU).
    paired = Job(
        JobId(1),
        4,
        0.0,
        state=JobState.RUNNING,
        placement=Placement.of({"s0n0": 4}),
        duration=100.0,
        shared_with=JobId(9),
    )
    assert not build_policy("sjf-ffs").decide(Snapshot(50.0, C4, [paired, guest])).start


def test_unknown_durations_use_the_gittins_las_estimate_or_say_what_is_missing() -> None:
    from teiresias.policy.gittins import ServiceDistribution

    jobs = [Job(JobId(1), 1, 0.0), Job(JobId(2), 1, 1.0)]
    with pytest.raises(ConfigError, match="no duration; give --samples"):
        build_policy("sjf-bsbf").decide(Snapshot(0.0, C4, jobs))
    dist = ServiceDistribution.from_values([10.0, 100.0, 1000.0])
    pol = build_policy("sjf-bsbf", PolicyParams(distribution=dist))
    assert pol.remaining(Job(JobId(3), 2, 0.0, total_executed_time=50.0)) == pytest.approx((1000.0 - 2 * 50.0) / 2)
    assert len(pol.decide(Snapshot(0.0, C4, jobs)).start) == 2


jobs_st = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.integers(0, 300),
        st.integers(1, 400),
        st.sampled_from(["vgg16", "resnet50", "other"]),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_st, name=st.sampled_from(SHARING_NAMES), interval=st.sampled_from([0.0, 30.0]))
def test_every_job_finishes_never_faster_than_alone_and_no_gpu_holds_three(rows, name, interval) -> None:
    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    trace = [TraceJob(i, g, float(s), float(d), m) for i, (g, s, d, m) in enumerate(rows)]
    model = load_sharing_model("etc/sharing.yaml")
    opt = SimulationOptions(interval=interval, slowdown=SlowdownTable.none(), progress=False)
    res = run(trace, cluster, build_policy(name, PolicyParams(sharing=model)), opt)
    assert sorted(r.job_id for r in res.records) == list(range(len(rows)))
    by_id = {tj.job_id: tj for tj in trace}
    for r in res.records:
        assert r.start >= by_id[r.job_id].submit_time
        assert r.end - r.start >= by_id[r.job_id].duration - 1e-6
        assert r.preemptions == 0
    assert 0.0 < res.summary.gpu_utilization <= 1.0 + 1e-9


def test_loader_refuses_unknown_keys_and_cli_wants_a_sharing_policy(tmp_path) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("default: {interferenc: 2}\n")
    with pytest.raises(ConfigError, match="unknown key 'default.interferenc' \\(did you mean 'interference'"):
        load_sharing_model(bad)
    from teiresias.cli import cli

    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        "1,4,0,1,vgg16,1000,0\n2,2,10,1,resnet50,100,0\n"
    )
    out = tmp_path / "o.json"
    r = CliRunner().invoke(
        cli,
        ["simulate", "-t", str(trace), "-c", "etc/cluster.yaml", "-p", "las", "--sharing-slowdown", "etc/sharing.yaml"],
    )
    assert r.exit_code == 2 and "add one of sjf-bsbf, sjf-ffs to --policy" in r.output
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            "-t",
            str(trace),
            "-c",
            "etc/cluster.yaml",
            "-p",
            "sjf-bsbf,sjf",
            "--sharing-slowdown",
            "etc/sharing.yaml",
            "-j",
            str(out),
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert {row["policy"] for row in (rows if isinstance(rows, list) else rows["policies"])} == {"sjf-bsbf", "sjf"}


@settings(max_examples=100, deadline=None)
@given(
    t1=st.integers(10, 5000),
    t2=st.integers(10, 5000),
    xi1=st.sampled_from([1.0, 1.25, 1.5, 2.0, 3.5]),
    xi2=st.sampled_from([1.0, 1.3, 1.5, 2.0, 4.0]),
)
def test_the_engine_replays_a_pair_as_theorem_1_computes_it(t1, t2, xi1, xi2) -> None:
    """Two different codes, one answer: the event-driven engine (rates, settles, re-pushed ends)
    and pair.overlapped (closed form) agree on both completion times of a forced pair."""
    from teiresias.policy.sjf_bsbf.pair import overlapped, sequential

    # The host starts at 0 with t1 + 1 s of work; the guest arrives at 1 s, when t1 is left.
    model = SharingModel(pairs={("h", "g"): (xi1, xi2)})
    trace = [TraceJob(1, 1, 0.0, float(t1) + 1.0, "h"), TraceJob(2, 1, 1.0, float(t2), "g")]
    c1 = Cluster.from_tiresias_spec(1, 1, 1)
    got = ends("sjf-ffs", trace, model, c1)
    want = overlapped(float(t1), float(t2), xi1, xi2)
    assert got[1][1] - 1.0 == pytest.approx(want.host_end, abs=1e-6)
    assert got[2][1] - 1.0 == pytest.approx(want.guest_end, abs=1e-6)
    bsbf = ends("sjf-bsbf", trace, model, c1)
    best = min(want.average, sequential(float(t1), float(t2)).average)
    assert (bsbf[1][1] + bsbf[2][1]) / 2 - 1.0 == pytest.approx(best, abs=1e-6)
