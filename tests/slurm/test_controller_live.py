"""The live controller against the real local Slurm cluster (job_submit.lua installed).

Jobs are sleep jobs; the ones that speak the preemption protocol trap USR1 and
write ack.json exactly as wrappers/protocol.py says. Thresholds are a few
GPU-seconds so demotion happens within seconds; every wait polls for a state.
"""

from __future__ import annotations

import json
import time

import pytest

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import (
    submit_protocol_job,
    submit_sleep,
)

pytestmark = pytest.mark.slurm

# --------------------------------------------------------------------------- tests


def test_submission_is_held_and_once_json_starts_it_consolidated(cluster, make_controller):
    """Interface: `controller run --once --json`; a 4-GPU job lands on one node (consolidate)."""
    job = submit_sleep(cluster, 4)
    sj = cluster.job(job)
    assert sj.state == "PENDING" and sj.priority == 0, "job_submit.lua should hold managed jobs"
    other = submit_sleep(cluster, 1, 600, "other")  # another partition: untouched by lua and controller
    cluster.wait_for(other, "RUNNING", timeout=20)
    cpu_only = cluster.submit("sleep 600", "-p", "gpu", "-c", "1", "-t", "10")  # no GPUs: Slurm's to run
    cluster.wait_for(cpu_only, "RUNNING", timeout=20)

    ctl = make_controller()
    proc = ctl.cli("controller", "run", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["plan"]["start"][str(job)][0]["gpus"] == 4 and len(out["plan"]["start"][str(job)]) == 1
    assert [(a["job"], a["action"], a["ok"]) for a in out["actions"]] == [(job, "start", True)]
    assert str(other) not in out["plan"]["queues"] and str(cpu_only) not in out["plan"]["queues"]
    node = out["plan"]["start"][str(job)][0]["node"]
    running = cluster.wait_for(job, "RUNNING", timeout=20)
    assert running.nodes == (node,)
    # The other partition's GPU is not given away: the 4-GPU job avoided that node.
    assert cluster.job(other).nodes[0] != node

    q = ctl.cli("queue", "--json")
    assert q.returncode == 0, q.stderr
    rows = json.loads(q.stdout)
    assert [r["job_id"] for r in rows] == [job]
    assert {"job_id", "user", "gpus", "state", "queue", "attained_gpu_seconds", "preemptions"} <= set(rows[0])
    assert rows[0]["gpus"] == 4 and rows[0]["queue"] == "Q1" and rows[0]["preemptions"] == 0


def test_spread_job_lands_on_the_node_list_the_policy_chose(cluster, make_controller):
    # Unmanaged jobs leave 2, 1, 2, 2 GPUs free on node1..4: no node holds 3, so
    # spread takes the fullest nodes first (node2's last GPU, then node1).
    held = [
        submit_sleep(cluster, g, 600, "other", "-w", n)
        for n, g in (("node1", 2), ("node2", 3), ("node3", 2), ("node4", 2))
    ]
    for h in held:
        cluster.wait_for(h, "RUNNING", timeout=20)
    job = submit_sleep(cluster, 3)
    ctl = make_controller(placement="spread")
    proc = ctl.cli("controller", "run", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    chosen = {p["node"]: p["gpus"] for p in json.loads(proc.stdout)["plan"]["start"][str(job)]}
    assert chosen == {"node2": 1, "node1": 2}
    running = cluster.wait_for(job, "RUNNING", timeout=20)
    assert set(running.nodes) == set(chosen) and running.num_nodes == 2


def test_new_job_overtakes_demoted_ones_and_preemption_requeues_exactly_enough(cluster, make_controller, tmp_path):
    """Ordering + preemption + attained service continuing after the requeue."""
    ctl = make_controller().start()
    old = [submit_protocol_job(cluster, tmp_path, 4, name=f"old{i}") for i in range(4)]
    for j in old:
        cluster.wait_for(j, "RUNNING", timeout=30)
    # 4 GPUs x 2 s > 8 GPU-s: all four demoted to Q2.
    poll("old jobs demoted to Q2", lambda: all(ctl.rec(j).queue == 1 for j in old), 30)

    new = submit_protocol_job(cluster, tmp_path, 6, run_for=6, name="new")  # needs 6 GPUs: two 4-GPU jobs
    cluster.wait_for(new, "RUNNING", timeout=60)
    recs = ctl.records()
    preempted = [j for j in old if recs[j].preemptions == 1]
    assert len(preempted) == 2, {j: (recs[j].phase, recs[j].preemptions) for j in old}
    assert all(recs[j].preemptions == 0 and recs[j].phase is Phase.RUNNING for j in set(old) - set(preempted))
    # Each requeue followed an acknowledged checkpoint, and the new job started after them.
    for j in preempted:
        (rq,) = ctl.audit(j, "requeue")
        assert rq["acked"] is True and rq["ckpt_bytes"] == 4096
        assert recs[j].ckpt_seconds == 0.25
        assert ctl.audit(new, "start")[0]["time"] >= rq["time"]
    attained_at_preemption = {j: recs[j].closed_run_seconds for j in preempted}
    assert all(v > 1.0 for v in attained_at_preemption.values())

    # Within Q2, FIFO by first start time: the ranks follow first_start_time.
    q2 = sorted((r for r in ctl.records().values() if r.queue == 1 and r.rank is not None), key=lambda r: r.rank)
    starts = [r.first_start_time for r in q2]
    assert starts == sorted(starts)

    # The preempted ones run again and their attained service continues. (With an 8 GPU-s threshold
    # the new job is in Q2 within ~2 s, where it ranks after the older jobs by first start time, so
    # the policy soon gives their GPUs back: Tiresias' FIFO by first start within a queue.)
    for j in preempted:
        sj = cluster.wait_for(j, "RUNNING", timeout=60, where=lambda s: s.restart_count == 1)
        assert sj.restart_count == 1
    poll(
        "attained service grows past the pre-preemption value",
        lambda: all(ctl.rec(j).run_start is not None for j in preempted),
        30,
    )
    now = time.time()
    from slurm_plugin.controller.accounting import total_executed

    for j in preempted:
        r = ctl.rec(j)
        assert r.closed_run_seconds == pytest.approx(attained_at_preemption[j])
        assert total_executed(r, now) > attained_at_preemption[j]
    assert ctl.alive()


def test_a_job_released_behind_the_controllers_back_is_held_again(cluster, make_controller):
    """The safety net of the hold mechanism: a managed job pending without a hold
    (here released with its mark cleared, as by an admin, while every GPU is taken;
    a plain `scontrol release` of a job the controller holds now lifts only a
    person's hold: job_submit.lua's slurm_job_modify) is held on sight."""
    fill = [submit_sleep(cluster, 4, 600, "other", "-w", n) for n in cluster.nodes]
    for f in fill:
        cluster.wait_for(f, "RUNNING", timeout=20)
    job = submit_sleep(cluster, 1)
    cluster.backend.release(job)
    assert cluster.job(job).held  # the controller's hold stands
    cluster.backend.set_hold_mark(job, False)
    cluster.backend.release(job)
    assert not cluster.job(job).held
    ctl = make_controller()
    proc = ctl.cli("controller", "run", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    acts = json.loads(proc.stdout)["actions"]
    assert [(a["job"], a["action"], a["ok"]) for a in acts] == [(job, "hold", True)]
    assert "without a hold" in acts[0]["reason"]
    sj = cluster.job(job)
    assert sj.state == "PENDING" and sj.held


def test_dry_run_changes_nothing_and_gittins_shows_its_index(cluster, make_controller, tmp_path):
    seed = tmp_path / "seed.csv"
    seed.write_text("duration\n" + "\n".join(str(v) for v in (5, 10, 20, 40, 80, 160, 320)) + "\n")
    job = submit_sleep(cluster, 2)
    ctl = make_controller(policy={"name": "gittins", "queues": [50], "gittins_samples": str(seed)})
    dry = ctl.cli("controller", "run", "--once", "--json", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert out["dry_run"] and [(a["job"], a["action"], a["ok"]) for a in out["actions"]] == [(job, "start", None)]
    assert str(job) in out["plan"]["index"]  # 2D-Gittins computed an index from the seed samples
    sj = cluster.job(job)
    assert sj.state == "PENDING" and sj.held and not (tmp_path / "state.db").exists()

    real = ctl.cli("controller", "run", "--once", "--json")
    assert real.returncode == 0, real.stderr
    cluster.wait_for(job, "RUNNING", timeout=20)
    rows = json.loads(ctl.cli("queue", "--json", "-j", str(job)).stdout)
    assert rows[0]["gittins_index"] is not None and rows[0]["gittins_index"] > 0
