"""The soak's checker on hand-built observations: a clean run passes, and each
way of breaking each invariant is caught (a checker that cannot fail would be
a defect). Fast unit tests beside the live soak (tests/soak/test_soak.py);
the observations stand in for sacct, the audit log, the state DB and the
driver's log of a real run (tests/soak/collect.py reads those)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.soak.collect import Event, Observation, Record, Run, build_units, parse_sacct
from tests.soak.invariants import LOST_KEY, check
from tests.soak.report import format_summary, format_violation, summary
from tests.soak.workload import COMPLETED, FAILED, JobSpec, Workload

T0 = 1000.0


def spec(key: str, **kw) -> JobSpec:
    base = dict(key=key, user="soak_u1", kind="plain", gpus=4, sbatch=("--gpus=4",), script="#!/bin/bash\nexit 0\n")
    return JobSpec(**{**base, **kw})


def run(sid: str, start: float | None, end: float | None, node: str, state: str = COMPLETED, **kw) -> Run:
    raw = int(sid.split("_")[0].split("+")[0]) if "_" not in sid else kw.pop("raw")
    return Run(
        sid,
        raw,
        state,
        submit=kw.pop("submit", (start or T0) - 1),
        start=start,
        end=end,
        nodes=(node,),
        gpus=kw.pop("gpus", 4),
        **kw,
    )


def submit(t: float, key: str, job: str) -> Event:
    return Event(t, "submit", key=key, job=job, t0=t - 0.1, line=f"sbatch --gpus=4 -J {key}")


def clean(**changes) -> Observation:
    """j1 runs on node1; j2 (checkpointing) runs on node2 and is preempted for j3,
    acks, and runs again on node1 once j1 is done."""
    jobs = {"j1": spec("j1"), "j2": spec("j2", kind="resumable", resumable=True), "j3": spec("j3")}
    w = Workload(0, 60.0, ("node1", "node2"), 4, jobs, ())
    events = [
        Event(T0, "start"),
        submit(1001.0, "j1", "1"),
        submit(1003.0, "j2", "2"),
        submit(1007.0, "j3", "3"),
        Event(1021.0, "drain"),
        Event(1022.0, "drained"),
        Event(1025.0, "end"),
    ]
    rows = [
        run("1", 1002, 1008, "node1"),
        run("2", 1004, 1009, "node2", "REQUEUED"),
        run("2", 1011, 1020, "node1", submit=1009),
        run("3", 1010, 1019, "node2"),
    ]
    audit = [
        {"time": 1002.1, "job": 1, "action": "start", "reason": "Q1", "nodes": ["node1"], "gpus": [4]},
        {"time": 1004.1, "job": 2, "action": "start", "reason": "Q1", "nodes": ["node2"], "gpus": [4]},
        {"time": 1008.0, "job": 2, "action": "queue", "reason": "Q1 -> Q2", "attained_gpu_seconds": 16.0},
        {"time": 1008.0, "job": 2, "action": "signal", "reason": "preempted by higher-priority job 3"},
        {"time": 1009.0, "job": 1, "action": "finished", "reason": "COMPLETED", "attained_gpu_seconds": 24.0},
        {"time": 1009.2, "job": 2, "action": "requeue", "reason": "checkpoint acknowledged", "acked": True},
        {"time": 1009.3, "job": 3, "action": "start", "reason": "Q1", "nodes": ["node2"], "gpus": [4]},
        {"time": 1010.9, "job": 2, "action": "start", "reason": "Q2", "nodes": ["node1"], "gpus": [4]},
        {"time": 1019.5, "job": 3, "action": "finished", "reason": "COMPLETED", "attained_gpu_seconds": 36.0},
        {"time": 1020.5, "job": 2, "action": "finished", "reason": "COMPLETED", "attained_gpu_seconds": 56.8},
    ]
    records = {
        1: Record(1, 4, COMPLETED, 1002.0, 6.0, 0, ((0, 1002.0, 1008.0, "slurm"),)),
        2: Record(2, 4, COMPLETED, 1004.0, 14.2, 1, ((0, 1004.0, 1009.2, "controller"), (1, 1011.0, 1020.0, "slurm"))),
        3: Record(3, 4, COMPLETED, 1010.0, 9.0, 0, ((0, 1010.0, 1019.0, "slurm"),)),
    }
    obs = Observation(
        seed=7,
        workload=w,
        poll_s=2.0,
        grace_s=10.0,
        events=events,
        rows=rows,
        audit=audit,
        records=records,
        rounds=[T0 + 0.5 + 2 * i for i in range(16)],
        lines={e.key: e.line for e in events if e.what == "submit"},
    )
    for k, v in changes.items():
        setattr(obs, k, v)
    obs.units = build_units(obs.workload, obs.events, obs.rows)
    return obs


def jobs_with(**changed: JobSpec) -> Workload:
    """The clean run's workload with some jobs' specs changed."""
    return Workload(0, 60.0, ("node1", "node2"), 4, {**clean().workload.jobs, **changed}, ())


def codes(obs: Observation) -> list[tuple[int, str, str]]:
    return [(v.invariant, v.what, v.key) for v in check(obs).violations]


def test_a_clean_run_keeps_every_invariant_and_counts_its_checks():
    obs = clean()
    res = check(obs)
    assert res.violations == []
    assert all(n > 0 for n in res.checks.values()), res.checks
    text = format_summary(summary(obs, res))
    assert "invariant 6" in text and "0 violation(s)" in text


def with_rows(obs: Observation, *rows: Run) -> Observation:
    return clean(rows=list(rows), events=obs.events, audit=obs.audit, records=obs.records, workload=obs.workload)


# ------------------------------------------------------------------ 1
def test_an_end_the_script_did_not_ask_for_is_caught_and_printed_with_its_events():
    obs = clean()
    rows = [r if r.sacct_id != "3" else replace(r, state=FAILED, exit_code=138) for r in obs.rows]
    obs = with_rows(obs, *rows)
    res = check(obs)
    assert [(v.invariant, v.what, v.key) for v in res.violations] == [(1, "end-state", "j3")]
    text = format_violation(obs, res.violations[0])
    assert "seed 7" in text and "sbatch --gpus=4 -J j3" in text and "soak_u1" in text
    assert "run 0 ended FAILED exit 138:0" in text and "driver  submit" in text and "audit   start" in text


def test_a_failure_with_another_exit_code_than_the_scripts_is_caught():
    obs = clean(workload=jobs_with(j3=spec("j3", kind="fail", ends=FAILED, exit_code=3)))
    obs = with_rows(obs, *[r if r.sacct_id != "3" else replace(r, state=FAILED, exit_code=2) for r in obs.rows])
    assert codes(obs) == [(1, "exit-code", "j3")]


def test_a_startable_job_still_there_when_the_driver_stops_waiting_is_lost():
    obs = clean()
    events = [*obs.events, Event(1022.5, "end-cancel", key="j3", job="3", extra={"waits_for": ""})]
    rows = [r if r.sacct_id != "3" else replace(r, start=None, end=1022.6, state="CANCELLED") for r in obs.rows]
    obs = clean(events=events, rows=rows)
    assert (1, "lost", "j3") in codes(obs)
    # ... but one that waits for good (held by a person) is not
    events[-1] = Event(1022.5, "end-cancel", key="j3", job="3", extra={"waits_for": "held by a person"})
    assert (1, "lost", "j3") not in codes(clean(events=events, rows=rows))
    # ... nor one the driver gave up on while the queue still moved (its cap): a note, not a verdict
    events[-1] = Event(1022.5, "end-cancel", key="j3", job="3", extra={"waits_for": ""})
    capped = [e if e.what != "drained" else replace(e, extra={"why": "cap"}) for e in events]
    res = check(clean(events=capped, rows=rows))
    assert not [v for v in res.violations if v.invariant == 1] and res.notes == [
        "j3: still pending at the driver's cap"
    ]


def test_a_run_after_a_final_end_and_overlapping_runs_are_caught():
    obs = clean()
    again = with_rows(obs, *obs.rows, run("1", 1013, 1014, "node2", submit=1012))
    assert (1, "ran-again", "j1") in codes(again)
    twice = [r if not (r.sacct_id == "2" and r.state == COMPLETED) else replace(r, start=1008) for r in obs.rows]
    assert (1, "ran-twice", "j2") in codes(with_rows(obs, *twice))


def test_a_second_controller_acting_on_the_cluster_is_caught():
    obs = clean(rival_audit=[{"time": 1005.0, "job": 3, "action": "start", "reason": "Q1, placed on node1"}])
    assert (1, "two-controllers", "") in codes(obs)


def test_a_job_the_controller_closed_as_vanished_is_caught():
    obs = clean()
    obs.records[3] = replace(obs.records[3], final_state="VANISHED")
    assert (1, "vanished", "j3") in codes(obs)


# ------------------------------------------------------------------ 2
def test_attained_service_that_goes_down_or_a_replaced_record_is_caught():
    obs = clean()
    obs.audit.append({"time": 1012.0, "job": 2, "action": "queue", "reason": "Q1 -> Q2", "attained_gpu_seconds": 0.0})
    obs.audit.sort(key=lambda e: e["time"])
    assert (2, "attained-down", "j2") in codes(obs)
    # a live figure corrected by less than a poll interval of GPU-time when the end is read is not
    obs = clean()
    obs.audit.append({"time": 1012.0, "job": 2, "action": "queue", "reason": "Q1 -> Q2", "attained_gpu_seconds": 5.0})
    obs.audit.sort(key=lambda e: e["time"])
    assert (2, "attained-down", "j2") not in codes(obs)
    obs = clean()
    obs.audit.append({"time": 1011.0, "job": 2, "action": "replaced", "reason": "job 2 is not the job recorded"})
    assert (2, "replaced", "j2") in codes(obs)


def test_a_run_missing_from_the_accounting_or_off_by_more_than_a_poll_is_caught():
    obs = clean()
    r2 = obs.records[2]
    obs.records[2] = replace(r2, segments=r2.segments[1:], closed_run_seconds=5.0)
    got = codes(obs)
    assert (2, "run-unaccounted", "j2") in got and (2, "total-mismatch", "j2") in got
    obs = clean()
    obs.records[3] = replace(obs.records[3], segments=((0, 1010.0, 1015.0, "slurm"),), closed_run_seconds=5.0)
    assert (2, "run-mismatch", "j3") in codes(obs)
    obs = clean()
    obs.records[3] = replace(obs.records[3], first_start_time=None)
    assert (2, "no-first-start", "j3") in codes(obs)


# ------------------------------------------------------------------ 3
def test_a_run_started_while_a_person_held_the_job_is_caught():
    obs = clean()
    hold = Event(1007.5, "hold", key="j3", job="3", by="owner", t0=1007.4)
    release = Event(1016.0, "release", key="j3", job="3", by="owner", t0=1015.9)
    assert (3, "hold", "j3") in codes(clean(events=[*obs.events, hold, release]))
    # a hold placed after the run began (it holds the next run, not this one) is kept
    late = Event(1012.5, "hold", key="j3", job="3", by="admin", t0=1012.4)
    assert codes(clean(events=[*obs.events, late])) == []


def test_node_lists_excluded_nodes_and_sizes_are_checked_on_every_run():
    jobs = clean().workload.jobs
    for changed, code in (
        (replace(jobs["j3"], required=("node1",)), "nodelist"),
        (replace(jobs["j3"], excluded=("node2",)), "excluded"),
        (replace(jobs["j3"], gpus=2), "size"),
        (replace(jobs["j3"], nodes=2, per_node=2), "node-count"),
    ):
        obs = clean(workload=jobs_with(j3=changed))
        assert (3, code, "j3") in codes(obs), code
    # a placement on an excluded node is caught even when Slurm refuses to start it there
    obs = clean(workload=jobs_with(j3=replace(jobs["j3"], excluded=("node1",))))
    obs.audit.append({"time": 1009.0, "job": 3, "action": "start", "reason": "Q1", "nodes": ["node1"], "gpus": [4]})
    assert (3, "excluded", "j3") in codes(obs)


def test_begin_times_dependencies_and_throttles_are_checked():
    jobs = clean().workload.jobs
    early = clean(workload=jobs_with(j3=replace(jobs["j3"], begin_s=30)))
    assert (3, "begin", "j3") in codes(early)
    dep = clean(workload=jobs_with(j3=replace(jobs["j3"], after=("afterok", "j2"))))
    assert (3, "dependency", "j3") in codes(dep)
    arr = spec("j4", kind="array", tasks=(0, 1), throttle=1, gpus=1)
    events = [*clean().events, submit(1001.5, "j4", "4")]
    rows = [
        *clean().rows,
        run("4_0", 1002, 1006, "node1", raw=5, gpus=1),
        run("4_1", 1005, 1007, "node2", raw=4, gpus=1),
    ]
    throttled = clean(workload=jobs_with(j4=arr), events=events, rows=rows)
    assert (3, "throttle", "j4") in codes(throttled)


# ------------------------------------------------------------------ 4
def test_a_preemption_for_a_job_that_then_does_not_start_is_caught():
    obs = clean()
    late = [r if r.sacct_id != "3" else replace(r, start=1025.0, end=1030.0) for r in obs.rows]
    got = codes(with_rows(obs, *late))
    assert (4, "preempted-for-nothing", "j3") in got
    # a fault in between excuses it
    events = [
        *obs.events,
        Event(1008.5, "fault", fault="controller-kill9"),
        Event(1012.0, "fault-end", fault="controller-kill9"),
    ]
    assert (4, "preempted-for-nothing", "j3") not in codes(clean(events=events, rows=late))


def test_the_beneficiary_may_wait_for_its_slowest_victims_ack():
    """Two victims for j3: a plain job requeued at once, and j2, whose Ack comes 8 s
    later; j3 starts when both are gone: no violation, though it started well after
    three rounds from the first requeue."""
    obs = clean()
    rows = []
    for r in obs.rows:
        if r.sacct_id == "2" and r.state == "REQUEUED":
            r = replace(r, end=1016.0)
        elif r.sacct_id == "2":
            r = replace(r, start=1018.0, end=1026.0)
        elif r.sacct_id == "3":
            r = replace(r, start=1017.0, end=1024.0)
        rows.append(r)
    audit = [dict(e) for e in obs.audit]
    for e in audit:
        if e["action"] == "requeue":
            e["time"] = 1016.2
    audit.append({"time": 1007.9, "job": 1, "action": "requeue", "reason": "preempted by higher-priority job 3"})
    audit.sort(key=lambda e: e["time"])
    got = codes(clean(rows=rows, audit=audit))
    assert (4, "preempted-for-nothing", "j3") not in got


# ------------------------------------------------------------------ 5
def test_gpus_idle_while_a_startable_job_waits_are_caught_outside_faults_only():
    obs = clean()
    late = [
        r if not (r.sacct_id == "2" and r.state == COMPLETED) else replace(r, start=1026.0, end=1030.0)
        for r in obs.rows
    ]
    events = [e for e in obs.events if e.what not in ("drained", "end")]
    rounds = [T0 + 0.5 + 2 * i for i in range(20)]
    got = codes(clean(rows=late, events=events, rounds=rounds))
    assert (5, "idle-gpus", "j2") in got
    kill = [
        Event(1009.5, "fault", fault="controller-kill9", t0=1009.5),
        Event(1024.0, "fault-end", fault="controller-kill9"),
    ]
    assert (5, "idle-gpus", "j2") not in codes(clean(rows=late, events=[*events, *kill], rounds=rounds))
    # held by its owner meanwhile: not startable
    hold = [
        Event(1009.8, "hold", key="j2", job="2", by="owner"),
        Event(1025.0, "release", key="j2", job="2", by="owner", t0=1025.0),
    ]
    assert (5, "idle-gpus", "j2") not in codes(clean(rows=late, events=[*events, *hold], rounds=rounds))


# ------------------------------------------------------------------ 6
def test_a_checkpointing_job_requeued_before_its_grace_or_without_its_signal_is_caught():
    obs = clean()
    for e in obs.audit:
        if e["action"] == "requeue":
            e["acked"] = False
    assert (6, "grace-cut", "j2") in codes(obs)
    obs = clean()
    obs.audit = [e for e in obs.audit if e["action"] != "signal"]
    assert (6, "no-checkpoint-signal", "j2") in codes(obs)
    # an admin's own `scontrol requeue` is not the controller's preemption
    requeue = Event(1009.1, "requeue", key="j2", job="2", by="admin", t0=1008.9)
    obs = clean(events=[*clean().events, requeue])
    obs.audit = [e for e in obs.audit if e["action"] not in ("signal", "requeue")]
    assert not [c for c in codes(obs) if c[0] == 6]


def test_a_plain_jobs_requeue_must_say_the_work_it_lost():
    jobs = clean().workload.jobs
    plain = jobs_with(j2=replace(jobs["j2"], resumable=False, kind="plain"))
    obs = clean(workload=plain)
    obs.audit = [e for e in obs.audit if e["action"] != "signal"]
    for e in obs.audit:
        if e["action"] == "requeue":
            e["reason"] = "preempted by higher-priority job 3; not a tsbatch job: requeued without a checkpoint"
    assert (6, "lost-work-uncounted", "j2") in codes(obs)
    for e in obs.audit:
        if e["action"] == "requeue":
            e[LOST_KEY] = 20.0
    assert not [c for c in codes(obs) if c[0] == 6]


# ------------------------------------------------------------------ sacct
def test_sacct_rows_with_epoch_times_become_runs():
    text = (
        "19|19|soak_u1|CANCELLED by 0|1795782341|None|1795782475|0|None assigned||0:0|sbatch -H\n"
        "25|25|soak_u3|REQUEUED|1795782397|1795782398|1795782400|2|node[1-2]|billing=2,cpu=2,gres/gpu=8,node=2|0:0|sbatch\n"
        "6_4|6|root|FAILED|1795781965|1795781990|1795781995|5|node2|cpu=1,gres/gpu=1|2:9|sbatch a|b\n"
    )
    a, b, c = parse_sacct(text)
    assert (a.state, a.start, a.nodes, a.gpus) == ("CANCELLED", None, (), 0)
    assert (b.raw, b.state, b.nodes, b.gpus, b.elapsed) == (25, "REQUEUED", ("node1", "node2"), 8, 2.0)
    assert (c.sacct_id, c.raw, c.exit_code, c.exit_signal) == ("6_4", 6, 2, 9)


def test_a_run_requeued_after_its_script_ended_ends_with_its_batch_step():
    # seed 20, j11: completed after 24 s, then an admin's requeue; the row says 28 s.
    text = (
        "84|84|u2|REQUEUED|1795790943|1795790944|1795790972|28|node3|billing=1,gres/gpu=1,node=1|0:0|sbatch\n"
        "84.batch|84.batch||COMPLETED|1795790944|1795790944|1795790968|24|node3|cpu=1,gres/gpu=1|0:0|\n"
        "84|84|u2|CANCELLED by 0|1795790972|None|1795791057|0|None assigned|billing=1|0:0|sbatch\n"
        "85|85|u2|REQUEUED|1795790943|1795790944|1795790972|28|node3|billing=1,gres/gpu=1,node=1|0:0|sbatch\n"
        "85.batch|85.batch||CANCELLED|1795790944|1795790944|1795790974|30|node3|cpu=1,gres/gpu=1|0:15|\n"
    )
    first, again, preempted = parse_sacct(text)
    assert (first.state, first.elapsed) == ("REQUEUED", 24.0) and again.start is None
    assert preempted.elapsed == 28.0  # killed by the requeue: the row's End stands


@pytest.mark.parametrize("key", ["j1", "j2", "j3"])
def test_the_clean_runs_units_have_their_sacct_runs(key):
    u = clean().units[key]
    assert u.runs and u.raw == int(u.sacct_id)
