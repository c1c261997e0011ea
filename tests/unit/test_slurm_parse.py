"""Parsers of Slurm 22.05 output, on real output captured from the local
cluster (tests/fixtures/slurm/capture.sh documents the scenario)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_plugin.backends.parse import (
    error_from_message,
    expand_hostlist,
    gres_count,
    job_gpus,
    parse_scontrol_job,
    parse_scontrol_kv,
    parse_sinfo_json,
    parse_squeue_json,
)
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def ids() -> dict[str, int]:
    out = {}
    for item in (FIX / "squeue_mixed.ids").read_text().split():
        name, _, job = item.partition("=")
        out[name] = int(job)
    return out


@pytest.fixture(scope="module")
def jobs():
    return {j.job_id: j for j in parse_squeue_json((FIX / "squeue_mixed.json").read_text())}


def test_running_jobs(jobs):
    i = ids()
    two = jobs[i["run_2node"]]
    assert (two.state, two.gpus, two.gpus_per_node, two.num_nodes) == ("RUNNING", 8, 4, 2)
    assert two.nodes == ("node2", "node3") and two.start_time and two.end_time is None
    assert two.time_limit_minutes == 10 and not two.held
    other = jobs[i["other_part"]]
    assert other.partition == "other" and other.gpus == 4 and other.time_limit_minutes is None


def test_requeued_job_is_pending_with_restart_and_begin_time(jobs):
    j = jobs[ids()["run_2gpu_requeued"]]
    assert (j.state, j.state_reason, j.restart_count) == ("PENDING", "BeginTime", 1)
    assert j.start_time is None and j.end_time is None, "expected times of pending jobs are dropped"
    assert j.eligible_time and j.eligible_time > j.submit_time + 100
    assert j.gpus == 2 and j.comment == "teiresias:dir=/tmp/x;profile=1"


def test_held_jobs(jobs):
    i = ids()
    user, admin, rq = jobs[i["held_user"]], jobs[i["held_admin"]], jobs[i["requeue_held"]]
    assert user.held and user.state_reason == "JobHeldUser" and user.priority == 0
    assert admin.held and admin.state_reason == "JobHeldAdmin"
    assert rq.held and rq.restart_count == 1
    assert not jobs[i["pend_resources"]].held


def test_pending_pinned_and_resources(jobs):
    i = ids()
    pinned = jobs[i["pinned"]]
    assert pinned.required_nodes == ("node2", "node3") and pinned.nodes == ("node2", "node3")
    res = jobs[i["pend_resources"]]
    assert res.state_reason == "Resources" and res.gpus == 4 and res.start_time is None


def test_finished_jobs(jobs):
    i = ids()
    ok, failed, cancelled = jobs[i["done_ok"]], jobs[i["failed"]], jobs[i["cancelled"]]
    assert ok.state == "COMPLETED" and ok.start_time and ok.end_time and ok.gpus == 0
    assert failed.state == "FAILED" and failed.state_reason == "NonZeroExitCode"
    assert cancelled.state == "CANCELLED" and cancelled.gpus == 1 and cancelled.nodes == ("node1",)
    assert cancelled.end_time >= cancelled.start_time


def test_sinfo_states_and_gpus():
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "sinfo_mixed.json").read_text())}
    assert nodes["node1"].state == {"IDLE"} and nodes["node1"].usable and nodes["node1"].gpus_used == 0
    assert nodes["node2"].state == {"MIXED"} and nodes["node2"].gpus_used == 4
    assert nodes["node4"].state == {"MIXED", "DRAIN"} and not nodes["node4"].usable
    assert all(n.gpus == 4 and n.partitions == ("gpu", "other") and n.cpus == 8 for n in nodes.values())


@pytest.fixture
def utc(monkeypatch):
    # scontrol prints local time; the fixtures were captured on a UTC host
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_scontrol_show_job_agrees_with_squeue_json(jobs, utc):
    lines = (FIX / "scontrol_show_job.txt").read_text().splitlines()
    assert len(lines) == 11
    for line in lines:
        s = parse_scontrol_job(line)
        q = jobs[s.job_id]
        for field in (
            "name",
            "user",
            "partition",
            "state",
            "priority",
            "restart_count",
            "requeue",
            "held",
            "gpus",
            "num_nodes",
            "required_nodes",
            "submit_time",
            "time_limit_minutes",
            "comment",
        ):
            assert getattr(s, field) == getattr(q, field), (s.job_id, field, getattr(s, field), getattr(q, field))
        if q.state == "RUNNING" or q.end_time:
            assert s.nodes == q.nodes and s.start_time == q.start_time


def test_scontrol_values_with_spaces():
    kv = parse_scontrol_kv("JobId=7 JobName=a b Comment=teiresias:dir=/x y;profile=1  StdIn=/dev/null Power=")
    assert kv == {
        "JobId": "7",
        "JobName": "a b",
        "Comment": "teiresias:dir=/x y;profile=1",
        "StdIn": "/dev/null",
        "Power": "",
    }
    # arguments like lr=0.1 stay in the value: Slurm's keys start upper-case
    kv = parse_scontrol_kv("JobId=8 Command=/x/train.sh lr=0.1 --epochs=3 WorkDir=/w")
    assert kv["Command"] == "/x/train.sh lr=0.1 --epochs=3" and kv["WorkDir"] == "/w"


def test_unreachable_payloads_raise():
    # what 22.05 prints (exit 0!) when no slurmctld answers; the backend then pings
    for name, parse in (("squeue_unreachable.json", parse_squeue_json), ("sinfo_unreachable.json", parse_sinfo_json)):
        with pytest.raises(SlurmError):
            parse((FIX / name).read_text())
    with pytest.raises(SlurmError, match="not JSON"):
        parse_squeue_json("squeue: error: Invalid --json")


def test_hostlists():
    assert expand_hostlist("node[1-3,5],gpu07") == ("node1", "node2", "node3", "node5", "gpu07")
    assert expand_hostlist("n[08-10]") == ("n08", "n09", "n10")
    assert expand_hostlist("a[1-2]b,c") == ("a1b", "a2b", "c")
    assert expand_hostlist("") == () and expand_hostlist("(null)") == ()


def test_gres_strings():
    assert gres_count("gres:gpu:2") == 2
    assert gres_count("gpu:tesla:4(IDX:0-3)") == 4
    assert gres_count("gres/gpu=3") == 3
    assert gres_count("gpu:2,mps:100") == 2 and gres_count("mps:100") == 0 and gres_count("") == 0
    assert job_gpus({"tres_per_task": "gres:gpu:1", "tasks": 3}) == (3, None)
    assert job_gpus({"tres_per_node": "gres:gpu:2", "node_count": 2}) == (4, 2)
    assert job_gpus({"gres_detail": ["gpu:2(IDX:0-1)", "gpu:2(IDX:2-3)"], "tres_per_job": "gres:gpu:4"}) == (4, None)


def test_error_messages_map_to_exceptions():
    errors = (FIX / "errors.txt").read_text()
    assert "Invalid job id specified" in errors  # the phrase below is Slurm's own
    assert isinstance(error_from_message("Invalid job id specified for job 5", 5), JobVanished)
    assert isinstance(
        error_from_message("slurm_load_jobs error: Unable to contact slurm controller (connect failure)"),
        SlurmUnreachable,
    )
    e = error_from_message("Job is pending execution for job 16", 16)
    assert type(e) is SlurmError and "pending execution" in str(e)


def test_scontrol_unset_numbers():
    # a job cancelled while pending prints NumTasks=N/A
    j = parse_scontrol_job(
        "JobId=9 JobName=x UserId=ann(1000) Priority=0 JobState=CANCELLED Reason=None "
        "Restarts=0 NumNodes=1 NumTasks=N/A TimeLimit=UNLIMITED NodeList="
    )
    assert (j.job_id, j.user, j.gpus, j.num_nodes, j.start_time, j.time_limit_minutes) == (9, "ann", 0, 1, None, None)
