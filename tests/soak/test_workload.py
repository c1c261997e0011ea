"""The soak's workload generator: a pure function of its seed that covers the
everyday sbatch grammar and the faults (issue 20 A)."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict

from tests.soak.collect import workload_from_json
from tests.soak.workload import FAULTS, KINDS, generate


def test_the_same_seed_gives_the_same_workload_and_another_seed_another():
    a, b = generate(11, duration_s=300, jobs=80), generate(11, duration_s=300, jobs=80)
    assert a == b
    assert generate(12, duration_s=300, jobs=80).actions != a.actions


def test_a_long_workload_covers_the_grammar_faults_and_user_actions():
    w = generate(5, duration_s=3600, jobs=1500, torch_jobs=12)
    kinds = {j.kind for j in w.jobs.values()}
    assert kinds == {*KINDS, "torch"}
    opts = " ".join(" ".join(j.sbatch) for j in w.jobs.values())
    for needle in (
        "--gpus=",
        "-G ",
        "--gres=gpu:",
        "--gpus-per-node=",
        "--gpus-per-task=1",
        "-N ",
        "--array=",
        "%",
        "--dependency=afterok:",
        "--dependency=afterany:",
        "-H",
        "-w ",
        "-x ",
        "--begin=now+",
        "--no-requeue",
        "-t 1 ",
        " : ",
        "gpu:a100:",
    ):
        assert needle in opts + " ", needle
    assert {g for j in w.jobs.values() for g in [j.gpus]} >= {1, 2, 3, 4, 6, 8, 12, 16}
    acts = {(a.what, a.by) for a in w.actions}
    assert {("hold", "owner"), ("hold", "admin"), ("release", "owner"), ("release", "admin")} <= acts
    assert {"cancel", "ungpu", "requeue"} <= {a.what for a in w.actions}
    assert {a.fault for a in w.actions if a.what == "fault"} == set(FAULTS)


def test_actions_are_in_time_order_and_faults_never_overlap():
    w = generate(3, duration_s=600, jobs=200)
    assert [a.at for a in w.actions] == sorted(a.at for a in w.actions)
    spans, open_ = [], {}
    for a in w.actions:
        if a.what == "fault":
            open_[a.fault] = a.at
        elif a.what == "fault-end":
            spans.append((open_.pop(a.fault), a.at))
    spans.sort()
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    assert len(spans) == 16  # one of each kind per 2.5 minutes


def test_every_job_is_a_request_the_cluster_can_meet_unless_it_says_so():
    w = generate(9, duration_s=1200, jobs=600)
    for j in w.jobs.values():
        words = shlex.split(" ".join(j.sbatch))
        assert words.count("-t") == (2 if j.kind == "hetjob" else 1), j
        if j.required:
            assert j.single_node and j.gpus <= 4
        if j.excluded:
            assert j.gpus <= 12 and (j.nodes or 1) < 4
        if j.per_node:
            assert j.gpus == j.per_node * (j.nodes or 1) and j.per_node <= 4
        assert j.runnable or j.kind == "typed"
        if j.after:
            assert j.after[1] in w.jobs and list(w.jobs).index(j.after[1]) < list(w.jobs).index(j.key)


def test_offered_load_follows_the_jobs_and_minutes_asked():
    short = generate(1, duration_s=120, jobs=36)
    many = generate(1, duration_s=120, jobs=360)
    work = lambda w: sum(j.work_s * j.gpus for j in w.jobs.values() if j.kind in ("plain", "resumable"))  # noqa: E731
    assert work(many) < 3 * work(short)  # ten times the jobs, each shorter


def test_a_saved_workload_reads_back_equal():
    w = generate(4, duration_s=600, jobs=150, torch_jobs=2)
    assert workload_from_json(json.loads(json.dumps(asdict(w)))) == w
