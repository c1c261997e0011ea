"""GPU sharing (SJF-BSBF) in the controller's records and Snapshot (pure; Slurm
data as squeue reports it, docs/sjf-bsbf.md §9). The live path is
tests/slurm/test_sharing_live.py."""

from __future__ import annotations

import sqlite3

from slurm_plugin.backends.base import SlurmJob, SlurmNode
from slurm_plugin.config import parse_config
from slurm_plugin.controller.reconcile import reconcile
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import JobState, Placement
from tests.unit.round_support import shard_job

CFG = parse_config({"partitions": ["gpu"]})


def sjob(job_id: int, state: str, nodes=(), *, shards: int = 1, start=None, end=None) -> SlurmJob:
    return shard_job(job_id, state, nodes, shards=shards, start_time=start, end_time=end)


NODES = [
    SlurmNode("node1", frozenset({"MIXED"}), 1, 1, ("gpu",), cpus=8, mem_mb=8192),
    SlurmNode("node2", frozenset({"IDLE"}), 1, 0, ("gpu",), cpus=8, mem_mb=8192),
]


def pair() -> dict[int, JobRecord]:
    on1 = Placement.of({"node1": 1})
    host = JobRecord(
        job_id=7,
        gpus=1,
        submit_time=17.0,
        phase=Phase.RUNNING,
        phase_since=50.0,
        planned=on1,
        run_start=50.0,
        run_restart=0,
        shared_with=8,
        share_role="host",
    )
    guest = JobRecord(
        job_id=8,
        gpus=1,
        submit_time=18.0,
        phase=Phase.RUNNING,
        phase_since=60.0,
        planned=on1,
        run_start=60.0,
        run_restart=0,
        shared_with=7,
        share_role="guest",
        sub_batch=16,
        accumulation=4,
    )
    return {7: host, 8: guest}


def test_a_running_pair_reaches_the_policy_and_its_gpu_is_counted_once():
    recs = pair()
    out = reconcile(
        CFG,
        recs,
        [sjob(7, "RUNNING", ("node1",), start=50.0), sjob(8, "RUNNING", ("node1",), start=60.0)],
        NODES,
        100.0,
    )
    jobs = {j.job_id: j for j in out.snapshot.jobs}
    assert jobs[7].shared_with == 8 and jobs[8].shared_with == 7
    assert (jobs[8].sub_batch, jobs[8].accumulation) == (16, 4) and jobs[7].accumulation == 1
    assert jobs[7].placement == Placement.of({"node1": 1}) and jobs[8].state is JobState.RUNNING
    # The guest's share is the host's GPU: node1 has none free, node2 its one.
    assert out.snapshot.free_gpus() == {"node1": 0, "node2": 1}


def test_only_shard_jobs_reach_the_policy_as_shareable():
    """A --gres=gpu job holds its GPUs whole: Slurm gives no shard of them, so the policy must
    not pair it (Job.shareable); a shard job, running or waiting, may share."""
    recs = pair()
    out = reconcile(
        CFG,
        recs,
        [
            sjob(7, "RUNNING", ("node1",), start=50.0),
            sjob(8, "RUNNING", ("node1",), start=60.0),
            sjob(9, "RUNNING", ("node2",), shards=0, start=70.0),
            sjob(10, "PENDING", shards=0),
            sjob(11, "PENDING"),
        ],
        NODES,
        100.0,
    )
    share = {j.job_id: j.shareable for j in out.snapshot.jobs}
    assert share == {7: True, 8: True, 9: False, 10: False, 11: True}


def test_when_the_host_ends_the_guest_runs_alone_and_keeps_its_sub_batch():
    recs = pair()
    out = reconcile(
        CFG,
        recs,
        [sjob(7, "COMPLETED", ("node1",), start=50.0, end=90.0), sjob(8, "RUNNING", ("node1",), start=60.0)],
        NODES,
        100.0,
    )
    (j,) = out.snapshot.jobs
    assert j.job_id == 8 and j.shared_with is None and j.placement == Placement.of({"node1": 1})
    assert (j.sub_batch, j.accumulation) == (16, 4)
    assert recs[8].shared_with is None and recs[8].share_role == ""
    assert any(job == 8 and "no longer shares GPUs with job 7" in n for job, n in out.notes)


def test_old_state_files_get_the_sharing_columns_on_open(tmp_path):
    db = tmp_path / "state.db"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, user TEXT, phase TEXT, gpus INTEGER,"
        " submit_time REAL, phase_since REAL)"
    )
    con.execute("INSERT INTO jobs VALUES (3, 'bob', 'PENDING', 1, 13.0, 13.0)")
    con.commit()
    con.close()
    store = StateStore(db)
    old = store.jobs()[3]
    assert (old.shared_with, old.share_role, old.sub_batch, old.accumulation, old.interference) == (
        None,
        "",
        None,
        1,
        None,
    )
    with store.transaction():
        for r in pair().values():
            store.save_job(r)
    store.close()
    again = StateStore(db).jobs()
    assert (again[8].shared_with, again[8].share_role, again[8].sub_batch, again[8].accumulation) == (7, "guest", 16, 4)


def test_queue_json_rows_carry_the_three_sharing_fields():
    from slurm_plugin.controller.view import build_rows

    rows = {r.job_id: r.to_json() for r in build_rows(pair().values(), 100.0)}
    assert {k: rows[8][k] for k in ("shared_with", "sub_batch", "accumulation")} == {
        "shared_with": 7,
        "sub_batch": 16,
        "accumulation": 4,
    }
    assert {k: rows[7][k] for k in ("shared_with", "sub_batch", "accumulation")} == {
        "shared_with": 8,
        "sub_batch": None,
        "accumulation": 1,
    }


def test_sharing_policies_need_samples_and_take_a_sharing_model(tmp_path):
    import pytest

    from slurm_plugin.config import parse_config
    from slurm_plugin.controller.loop import default_policy
    from teiresias.errors import ConfigError

    with pytest.raises(ConfigError, match="policy.gittins_samples: policy sjf-bsbf estimates job lengths"):
        parse_config({"policy": {"name": "sjf-bsbf"}})
    with pytest.raises(ConfigError, match="policy.sharing: file .*nope.yaml does not exist"):
        parse_config(
            {
                "policy": {
                    "name": "sjf-bsbf",
                    "gittins_samples": "teiresias/data/yarn-gput1000.csv",
                    "sharing": str(tmp_path / "nope.yaml"),
                }
            }
        )
    cfg = parse_config(
        {
            "policy": {
                "name": "sjf-bsbf",
                "gittins_samples": "teiresias/data/yarn-gput1000.csv",
                "sharing": "etc/sharing.yaml",
            }
        }
    )
    policy = default_policy(cfg, None)
    assert policy.name == "sjf-bsbf" and policy.model.gpu_memory_gb == 11  # etc/sharing.yaml's


def test_a_guest_starts_only_where_slurm_can_only_give_it_its_hosts_gpu():
    from dataclasses import replace

    from slurm_plugin.controller.sharing import cannot_share

    on1 = Placement.of({"node1": 1})
    host = JobRecord(job_id=7, gpus=1, phase=Phase.RUNNING, planned=on1)
    guest = sjob(8, "PENDING")
    hsj = sjob(7, "RUNNING", ("node1",))
    recs = {7: host, 8: JobRecord(job_id=8, gpus=1)}
    slurm = {7: hsj, 8: guest}
    assert cannot_share(guest, hsj, host, on1, recs, slurm, {"node1": 0}) is None
    assert "asks for whole GPUs" in cannot_share(replace(guest, shards=0), hsj, host, on1, recs, slurm, {})
    assert "holds whole (--gres=gpu)" in cannot_share(guest, replace(hsj, shards=0), host, on1, recs, slurm, {})
    assert "has an idle GPU" in cannot_share(guest, hsj, host, on1, recs, slurm, {"node1": 1})
    # Another shard job alone on node1's other GPU: Slurm's first fit, not the plan, would pick.
    recs9 = {**recs, 9: JobRecord(job_id=9, gpus=1, phase=Phase.RUNNING)}
    why = cannot_share(guest, hsj, host, on1, recs9, {**slurm, 9: sjob(9, "RUNNING", ("node1",))}, {"node1": 0})
    assert "job 9 also holds a GPU's shards alone" in why
    assert "not running" in cannot_share(guest, hsj, replace(host, phase=Phase.PREEMPTING), on1, recs, slurm, {})


def _lines(points):
    from wrappers.protocol import RunRecord

    return [RunRecord(job_id=8, restart_count=0, steps=s, median_step_s=0.1, nodes=1, time=t) for t, s in points]


def test_xi_is_the_alone_step_rate_over_the_shared_one_from_the_cumulative_counts():
    from slurm_plugin.controller.sharing import measured_xi, step_rate

    # A host: 10 steps/s alone until t=200, then 5 steps/s while shared until t=400.
    host = _lines([(60, 600), (120, 1200), (180, 1800), (260, 2100), (320, 2400), (380, 2700)])
    assert step_rate(host, 0, 200) == 10.0 and step_rate(host, 200, 400) == 5.0
    assert measured_xi(host, 0.0, 200.0, 400.0, float("inf")) == 2.0
    # A guest: shared from its start (4 steps/s) until t=200, then alone (6 steps/s): xi 1.5.
    guest = _lines([(60, 240), (120, 480), (180, 720), (260, 1200), (320, 1560)])
    assert measured_xi(guest, 0.0, 0.0, 200.0, float("inf")) == 1.5
    # One record in a window is no rate: nothing measured rather than a guess.
    assert measured_xi(_lines([(60, 600), (260, 900), (320, 1200)]), 0.0, 200.0, 400.0, float("inf")) is None


def test_measured_xi_replaces_the_models_guess_and_never_goes_below_one():
    from slurm_plugin.controller.sharing import with_measured
    from teiresias.policy.sjf_bsbf.model import SharingModel

    m = with_measured(SharingModel(), {"resnet": 1.8, "noisy": 0.9})
    assert m.interference("resnet", "noisy") == (1.8, 1.0)
    assert m.interference("other", "resnet") == (1.5, 1.8)  # unmeasured: the model's default
    assert with_measured(m, {}) is m


def test_a_pair_end_is_dated_by_slurm_and_xi_is_kept_per_model(tmp_path):
    recs = pair()
    recs[7].shared_since = recs[8].shared_since = 60.0
    reconcile(
        CFG,
        recs,
        [sjob(7, "COMPLETED", ("node1",), start=50.0, end=90.0), sjob(8, "RUNNING", ("node1",), start=60.0)],
        NODES,
        100.0,
    )
    assert recs[7].shared_until == 90.0 and recs[8].shared_until == 90.0
    store = StateStore(tmp_path / "s.db")
    with store.transaction():
        for r, xi, end in ((recs[7], 1.4, 90.0), (recs[8], 1.7, 95.0)):
            r.interference, r.end_time, r.name = xi, end, "ResNet"
            store.save_job(r)
    assert store.measured_interference() == {"resnet": 1.7}  # the latest


def test_controller_once_json_shows_the_pair_decisions():
    from slurm_plugin.controller.loop import plan_to_json
    from teiresias.domain import JobId, Plan
    from teiresias.domain.plan import Sharing

    plan = Plan(
        start={JobId(8): Placement.of({"node1": 1})},
        sharing={
            JobId(8): Sharing(
                partner=JobId(7),
                sub_batch=4,
                accumulation=4,
                slowdown=1.2,
                partner_slowdown=1.2,
                alone_slowdown=1.33,
                shared_avg_jct=818.1,
                sequential_avg_jct=898.6,
            )
        },
    )
    assert plan_to_json(plan)["sharing"] == {
        "8": {
            "partner": 7,
            "sub_batch": 4,
            "accumulation": 4,
            "slowdown": 1.2,
            "partner_slowdown": 1.2,
            "alone_slowdown": 1.33,
            "shared_avg_jct": 818.1,
            "sequential_avg_jct": 898.6,
        }
    }


def test_each_jobs_own_history_reaches_the_policy(tmp_path):
    """Issue 22 item 4: the controller hands sjf-bsbf each (user, job name)'s finished GPU-times
    (archived jobs included), so two fresh jobs of one size get their own lengths."""
    from pathlib import Path

    from slurm_plugin.controller.audit import AuditLog
    from slurm_plugin.controller.loop import Controller
    from teiresias.domain import Job, JobId
    from tests.unit.slurm_double import InMemorySlurm

    samples = Path(__file__).resolve().parents[2] / "teiresias" / "data" / "yarn-gput1000.csv"
    cfg = parse_config(
        {
            "state_db": str(tmp_path / "s.db"),
            "audit_log": str(tmp_path / "a.jsonl"),
            "policy": {"name": "sjf-bsbf", "gittins_samples": str(samples)},
        }
    )
    store = StateStore(cfg.state_db)
    runs = [(1, "alice", "long", 5000.0), (2, "alice", "long", 5200.0), (3, "alice", "long", 4800.0)]
    runs += [(4, "bob", "short", 100.0), (5, "bob", "short", 120.0), (6, "bob", "short", 80.0), (7, "bob", "x", 9.0)]
    with store.transaction():
        for jid, user, name, gpu_s in runs:
            store.save_job(
                JobRecord(
                    job_id=jid, gpus=1, submit_time=0.0, phase=Phase.FINISHED, phase_since=1.0, user=user, name=name
                )
            )
            store.add_sample(jid, gpu_s)
    store.archive_job(1)  # an archived job's run still counts
    assert sorted(store.samples_by_job()[("alice", "long")]) == [4800.0, 5000.0, 5200.0]
    ctl = Controller(cfg, InMemorySlurm({"node1": 1}), store, AuditLog(cfg.audit_log))
    pol = ctl.policy()
    assert set(pol.history) == {("alice", "long"), ("bob", "short")}  # 3 runs at least
    long_job = Job(JobId(10), 1, 0.0, user="alice", model_name="long")
    short_job = Job(JobId(11), 1, 0.0, user="bob", model_name="short")
    other = Job(JobId(12), 1, 0.0, user="bob", model_name="x")
    assert pol.remaining(long_job) == 5000.0 and pol.remaining(short_job) == 100.0
    assert pol.remaining(other) == pol.distribution.mean_residual(0.0)  # the site's
