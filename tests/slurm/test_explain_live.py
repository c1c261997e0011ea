"""`teiresias explain` against a real controller process on the real local Slurm cluster:
a job pending behind running ones, a placed job, and a preempted one, each explanation's
facts checked against Slurm and the audit log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import REPO, TEIRESIAS, submit_protocol_job, submit_sleep

# The real non-root users and helpers of the queue's privacy test (same rules for explain).
from tests.slurm.test_controller_ops_live import (  # noqa: F401
    GROUP,
    USER,
    as_user,
    once,
    one_line,
    real_users,
    submit_as,
    variant,
)

pytestmark = pytest.mark.slurm


def explain(cluster, ctl, job: int, *extra: str) -> dict:
    p = subprocess.run(
        [*TEIRESIAS, "explain", str(job), "-c", str(ctl.config), "--json", *extra],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_pending_placed_and_preempted_jobs_explained(cluster, make_controller, tmp_path):
    # 80 GPU-s: a 4-GPU job leaves Q1 after 20 s, long enough to look at the waiting job even on a busy host.
    ctl = make_controller(policy={"name": "las", "queues": [80]}).start()
    old = [submit_protocol_job(cluster, tmp_path, 4, name=f"old{i}") for i in range(4)]
    late = submit_protocol_job(cluster, tmp_path, 4, name="late")
    running = {j: cluster.wait_for(j, "RUNNING", timeout=30) for j in old}
    poll(
        "a round that saw all four run",
        lambda: all((r := ctl.rec(j)) is not None and r.phase is Phase.RUNNING for j in old),
        30,
    )

    # 1. Pending behind running ones: every GPU is held by the four jobs ahead of it, all in Q1.
    e = explain(cluster, ctl, late)
    if e["state"] == "PENDING" and ctl.rec(old[0]).queue == 0:
        assert e["queue"] == "Q1" and e["rank"] == 5 and e["ranked"] == 5
        assert e["slurm_state"] == "PENDING"
        ahead = {a["job"]: a for a in e["ahead"]}
        assert set(ahead) == set(old) and e["ahead_hidden"] == {"jobs": 0, "gpus_held": 0}
        for j in old:  # the GPUs they hold are where Slurm runs them
            assert {h["node"] for h in ahead[j]["holds"]} == set(running[j].nodes)
            assert sum(h["gpus"] for h in ahead[j]["holds"]) == 4
        assert [n["free"] for n in e["nodes"]] == [0, 0, 0, 0] and e["gpus"] == 4
        assert e["next_event"]["what"].startswith("job ") and "drops to Q2 at 80 GPU-s" in e["next_event"]["what"]
        assert e["next_event"]["at"] > e["plan_time"]
        text = subprocess.run(
            [*TEIRESIAS, "explain", str(late), "-c", str(ctl.config)],
            capture_output=True,
            text=True,
            env=cluster.env,
            cwd=REPO,
            timeout=60,
        )
        assert text.returncode == 0 and f"job {late} waits in Q1 at rank 5 of 5" in text.stdout
    else:  # the machine was too slow to look within the 20 s window: say so rather than pass quietly
        pytest.fail(f"job {late} was no longer waiting behind Q1 jobs when explained: {e['summary']}")

    # 2. The olds drop to Q2; the late job (Q1) preempts one of them and is placed.
    sj = cluster.wait_for(late, "RUNNING", timeout=60)
    poll("the controller saw it run", lambda: ctl.rec(late).phase is Phase.RUNNING, 30)
    e = explain(cluster, ctl, late)
    assert e["state"] == "RUNNING" and e["slurm_state"] == "RUNNING"
    assert {p["node"] for p in e["placement"]} == set(sj.nodes) and sum(p["gpus"] for p in e["placement"]) == 4
    start = ctl.audit(late, "start")[0]
    assert start["reason"].endswith("placed on " + ",".join(p["node"] for p in e["placement"]))

    # 3. The preempted job: why (the audit's signal reason), and that it now waits.
    victim = poll("a preempted job", lambda: next((j for j in old if ctl.rec(j).preemptions == 1), None), 30)
    poll("it is pending again", lambda: ctl.rec(victim).phase is Phase.PENDING and ctl.rec(victim).preemptions == 1, 30)
    e = explain(cluster, ctl, victim)
    (signal,) = ctl.audit(victim, "signal")
    assert e["preemptions"] == 1 and e["last_preemption"]["reason"] == signal["reason"]
    assert signal["reason"] == f"preempted by higher-priority job {late}"
    assert e["last_preemption"]["time"] <= signal["time"]
    if e["state"] == "PENDING":  # until the late job drops to Q2 too
        assert e["queue"] == "Q2" and e["threshold_crossed"] == 80.0 and e["next_threshold"] is None
        assert late in {a["job"] for a in e["ahead"]}
    assert ctl.audit(victim, "queue")[0]["reason"] == "Q1 -> Q2"
    assert ctl.alive()


def test_unknown_job_is_exit_2_and_one_line(cluster, make_controller, tmp_path):
    ctl = make_controller()
    subprocess.run(
        [*TEIRESIAS, "controller", "run", "-c", str(ctl.config), "--once"],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    p = subprocess.run(
        [*TEIRESIAS, "explain", "999999", "-c", str(ctl.config)],
        capture_output=True,
        text=True,
        env=cluster.env,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "999999: no such managed job" in p.stderr


def test_a_real_user_explains_only_what_queue_shows_them(cluster, real_users, make_controller):  # noqa: F811
    """Under PrivateData=jobs a non-root user explains their own job, sees root's job
    ahead of it only as a count, and gets the unknown-job answer for root's job."""
    base = Path(f"/var/tmp/tt-observe-explain-{os.getpid()}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    conf_text = cluster.conf.read_text()
    try:
        ctl = make_controller()
        shared = base / "teiresias.yaml"
        shutil.copy(
            variant(
                ctl,
                "shared.yaml",
                state_db=str(base / "lib" / "state.db"),
                audit_log=str(base / "log" / "audit.jsonl"),
                file_group=GROUP,
            ),
            shared,
        )
        os.chmod(shared, 0o644)
        mine = submit_sleep(cluster, 2)  # root's, ranked first
        theirs = submit_as(cluster, USER)
        cluster.conf.write_text(conf_text + "PrivateData=jobs\n")
        subprocess.run(["scontrol", "reconfigure"], env=cluster.env, check=True, timeout=30)
        poll(
            "PrivateData in force",
            lambda: as_user(cluster, USER, "squeue", "-h", "-o", "%i").stdout.split() == [str(theirs)],
            30,
        )
        old = os.umask(0)
        try:
            assert once(cluster, shared).returncode == 0
        finally:
            os.umask(old)

        def user_explain(job: int, *extra: str) -> subprocess.CompletedProcess:
            return as_user(
                cluster, USER, "/usr/bin/python3", "-m", "teiresias", "explain", str(job), "-c", str(shared), *extra
            )

        p = user_explain(theirs, "--json")
        assert p.returncode == 0, p.stderr
        e = json.loads(p.stdout)
        assert e["job_id"] == theirs and e["rank"] == 2 and e["ahead"] == []
        assert e["ahead_hidden"]["jobs"] == 1  # root's job: counted, not named
        assert "root" not in p.stdout and f"job {mine}" not in p.stdout
        denied = user_explain(mine)
        unknown = user_explain(999999)
        assert denied.returncode == unknown.returncode == 2
        assert one_line(denied) == one_line(unknown).replace("999999", str(mine))
        # root sees both, named.
        assert {a["job"] for a in explain(cluster, ctl, theirs, "-c", str(shared))["ahead"]} == {mine}
    finally:
        cluster.conf.write_text(conf_text)
        subprocess.run(["scontrol", "reconfigure"], env=cluster.env, timeout=30)
        shutil.rmtree(base, ignore_errors=True)
