"""Themis on the real local Slurm cluster (4 nodes x 4 fake GPUs): two accounts, one a 16-trial
search of 1-GPU jobs, the other three 4-GPU jobs, under 20 s leases.

The jobs keep their own progress in a file (one step a second), so a job preempted at a
lease end resumes where it stopped after the controller's requeue, as a checkpointing job
would. Checked: every job finishes; lease expiries and auctions are in the audit log;
`teiresias queue --json` shows app, rho and lease_ends; and both apps end with a
finish-time fairness rho close to each other."""

from __future__ import annotations

import json
import subprocess

import pytest

from teiresias.simulator.metrics import JobRecord as SimRecord
from teiresias.simulator.metrics import app_rho
from tests.helpers import poll
from tests.slurm.controller_support import TEIRESIAS

pytestmark = pytest.mark.slurm

STEPS = r"""#!/bin/bash
f="$WORKDIR/$SLURM_JOB_ID.steps"
n=$(cat "$f" 2>/dev/null || echo 0)
while [ "$n" -lt "$WORK" ]; do sleep 1 & wait $!; n=$((n + 1)); echo "$n" > "$f"; done
"""
SEARCH_STEPS, BIG_STEPS = 12, 30


def test_two_apps_share_the_cluster_with_close_rho(cluster, make_controller, tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    ctl = make_controller(policy={"name": "themis", "lease": 20, "fairness_knob": 0.5}).start()

    def submit(account: str, name: str, gpus: int, steps: int) -> int:
        return cluster.submit(
            STEPS,
            "-p",
            "gpu",
            f"--gpus={gpus}",
            "-t",
            "10",
            f"--account={account}",
            f"--job-name={name}",
            env={"WORKDIR": str(work), "WORK": str(steps)},
        )

    big = [submit("bob", f"big-{i}", 4, BIG_STEPS) for i in range(3)]
    search = [submit("alice", f"hp-{i}", 1, SEARCH_STEPS) for i in range(16)]
    jobs = big + search

    # While jobs run, the queue shows each job's app, its app's rho and a running job's lease end.
    def queue_rows():
        r = subprocess.run(
            [*TEIRESIAS, "queue", "-c", str(ctl.config), "--json"], capture_output=True, text=True, env=cluster.env
        )
        if r.returncode == 2 and "no controller state yet" in r.stderr:
            return None  # the controller's first round has not written its DB yet
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        return rows if any(x["lease_ends"] for x in rows) else None

    rows = poll("a running job with a lease in `teiresias queue --json`", queue_rows, timeout=60, every=1)
    apps = {x["job_id"]: x["app"] for x in rows}
    assert {apps[j] for j in big} == {"bob/big"} and {apps[j] for j in search} == {"alice/hp"}
    assert all(x["rho"] is not None and x["rho"] > 0 for x in rows if x["state"] != "FINISHED")

    def all_done():
        recs = ctl.records()
        return recs if all(j in recs and recs[j].final_state == "COMPLETED" for j in jobs) else None

    recs = poll("all 19 jobs COMPLETED", all_done, timeout=150, every=1)
    assert ctl.audit(action="auction"), "no auction in the audit log"
    expiries = ctl.audit(action="lease-expired") + ctl.audit(action="lease-renewed")
    assert expiries, "no lease expiry in the audit log (30-step jobs outlive a 20 s lease)"
    assert any(set(e["rho"]) == {"alice/hp", "bob/big"} for e in ctl.audit(action="auction"))

    sim = [
        SimRecord(
            job_id=j,
            gpus=recs[j].gpus,
            model="",
            submit=recs[j].submit_time,
            start=recs[j].first_start_time or recs[j].submit_time,
            end=recs[j].end_time,
            jct=recs[j].end_time - recs[j].submit_time,
            queue_delay=0.0,
            preemptions=recs[j].preemptions,
            overhead=0.0,
            slowed=False,
            nodes=(),
            app=apps[j],
            work=float(BIG_STEPS if j in big else SEARCH_STEPS),
        )
        for j in jobs
    ]
    rho = app_rho(sim, 16)
    print(f"rho per app: {rho}; lease ends seen: {len(expiries)}; auctions: {len(ctl.audit(action='auction'))}")
    lo, hi = min(rho.values()), max(rho.values())
    # Measured: themis 1.50 / 1.15 (1.3x apart); las on the same jobs 2.23 / 0.73 (3.0x): the search
    # waits behind the big jobs. 2x leaves room for a loaded machine and still fails las.
    assert hi <= 2.0 * lo, f"apps' finish-time fairness far apart: {rho}"


def test_an_app_keeps_its_running_jobs_at_a_lease_end(cluster, make_controller, tmp_path):
    """Issue 22 item 7, live on 4 nodes x 4 GPUs: one app of six 4-GPU jobs (20 steps each) under
    8-s leases. Four run, two wait; at every lease end the app wins the same 16 GPUs again, so its
    running jobs keep them (b9c4356 ordered the app's jobs by 2D-LAS and preempted running ones to
    start its waiting ones, its share unchanged: live, four jobs preempted at 122 of their 150 s)."""
    work = tmp_path / "work"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    ctl = make_controller(policy={"name": "themis", "lease": 8}).start()
    jobs = [
        cluster.submit(
            STEPS,
            "-p",
            "gpu",
            "--gpus=4",
            "-t",
            "10",
            "--account=carol",
            f"--job-name=trial-{i}",
            env={"WORKDIR": str(work), "WORK": "20"},
        )
        for i in range(6)
    ]

    def all_done():
        recs = ctl.records()
        return recs if all(j in recs and recs[j].final_state == "COMPLETED" for j in jobs) else None

    recs = poll("all 6 jobs COMPLETED", all_done, timeout=150, every=1)
    renewed = ctl.audit(action="lease-renewed")
    assert renewed, "no lease ended while the jobs ran (20-step jobs outlive an 8-s lease)"
    assert not ctl.audit(action="lease-expired"), ctl.audit(action="lease-expired")
    assert {j: recs[j].preemptions for j in jobs} == {j: 0 for j in jobs}
