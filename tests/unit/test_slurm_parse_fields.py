"""The fields poll (slurm_plugin/backends/fields.py) against ``squeue --json`` on the
same jobs, captured at the same moment from a real Slurm 22.05
(tests/fixtures/slurm/capture_fields.sh: held and marked jobs, arrays with and
without a throttle and split tasks, -x, --constraint, -w, a dependency, typed GPUs,
untyped and typed shards, a het job, running, suspended, requeued and finished jobs),
then a poll later after a requeue and two updates."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from slurm_plugin.backends import fields
from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.backends.parse import parse_squeue_json

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def ids() -> dict[str, int]:
    return {k: int(v) for k, _, v in (x.partition("=") for x in (FIX / "fields.ids").read_text().split())}


def poll(prefix: str, cache: fields.PollCache, all_details: bool) -> tuple[dict[int, SlurmJob], list[int]]:
    """One poll from the captured outputs, as CliBackend(poll="fields") makes it: the
    detail of every job (a first poll) or only of the jobs the poll asks for."""
    records, unsplit = fields.split_records((FIX / f"{prefix}_squeue_O.txt").read_text())
    assert unsplit == []
    excluded = fields.parse_excluded((FIX / f"{prefix}_squeue_x.txt").read_text())
    every = fields.parse_details((FIX / f"{prefix}_scontrol.txt").read_text())
    asked = [r.job_id for r in fields.needs_detail(records, excluded, cache)]
    details = every if all_details else {j: every[j] for j in asked}
    fields.learn(records, details, cache)
    assert fields.unknown_reasons(records, cache) == []
    return {j.job_id: j for j in fields.build_jobs(records, excluded, details, cache)}, asked


def same_as_json(got: dict[int, SlurmJob], prefix: str) -> None:
    want = {j.job_id: j for j in parse_squeue_json((FIX / f"{prefix}_squeue.json").read_text())}
    assert set(got) == set(want)
    for job_id, j in want.items():
        a, b = asdict(j), asdict(got[job_id])
        assert a == b, (job_id, j.name, {k: (a[k], b[k]) for k in a if a[k] != b[k]})


def test_fields_poll_reads_every_field_as_squeue_json():
    cache = fields.PollCache.empty()
    got, _ = poll("fields", cache, all_details=True)
    same_as_json(got, "fields")
    i = ids()
    # The fields the controller reads beyond the common ones, each on the job that shows it.
    assert got[i["excluded"]].excluded_nodes == ("node1", "node2")
    assert got[i["constrained"]].features == "fast"
    assert got[i["pinned"]].required_nodes == ("node2",)
    assert got[i["typed_gpu"]].gpu_type == "g2"
    assert got[i["shard_typed"]].shard_gpus == (1,) and got[i["shard_typed"]].shards == 2
    assert got[i["run_shard"]].gpu_ids and got[i["run_2node"]].gpu_ids
    assert got[i["array_throttled"]].array_tasks == "2-5%2" and got[i["array_throttled"]].array_max_tasks == 2
    tasks = [j for j in got.values() if j.array_job_id == i["array_throttled"] and j.array_task_id in (0, 1)]
    assert len(tasks) == 2 and all(t.array_max_tasks == 2 and t.held_by_teiresias for t in tasks)
    assert got[i["run_het"]].het_job_id == i["run_het"]
    assert got[i["time_limit"]].time_limit_minutes == 1564 and "|" in got[i["time_limit"]].name
    assert got[i["requeue_held"]].state_reason == "JobHeldUser"  # squeue printed its description
    assert got[i["req_node_drained"]].state_reason == "ReqNodeNotAvail"
    assert got[i["suspended"]].state == "SUSPENDED" and got[i["suspended"]].gpu_ids
    assert got[i["array_cancelled"]].array_job_id == i["array_cancelled"]


def test_a_later_poll_reads_details_only_where_the_jobs_changed_and_stays_right():
    """Between two polls one job is requeued and runs again (new GPUs may be its), an
    array task splits off and starts, a user changes a job's excluded nodes and an
    array's throttle: the second poll asks scontrol only about the new runs and
    reads the rest from squeue, and every job equals squeue --json's again."""
    cache = fields.PollCache.empty()
    poll("fields", cache, all_details=True)
    got, asked = poll("fields2", cache, all_details=False)
    same_as_json(got, "fields2")
    i = ids()
    assert i["run_typed"] in asked and got[i["run_typed"]].restart_count == 1
    assert len(asked) <= fields_single_max()
    assert got[i["excluded"]].excluded_nodes == ("node4",)
    assert got[i["array_throttled"]].array_max_tasks == 3
    assert all(
        j.array_max_tasks == 3 for j in got.values() if j.array_job_id == i["array_throttled"] and j.array_task_id
    )


def fields_single_max() -> int:
    from slurm_plugin.backends.cli import DETAIL_SINGLE_MAX

    return DETAIL_SINGLE_MAX


def test_an_unchanged_job_is_not_parsed_again():
    cache = fields.PollCache.empty()
    first, _ = poll("fields", cache, all_details=True)
    again, asked = poll("fields", cache, all_details=False)
    assert asked == []
    assert all(again[j] is first[j] for j in first)


def test_a_value_holding_a_separator_is_read_another_way():
    text = (FIX / "fields_squeue_O.txt").read_text()
    first = text.split(fields.END, 1)[0]
    job = first.split(fields.SEP, 1)[0].strip()
    broken = first.replace(fields.SEP, fields.SEP + "x" + fields.SEP, 1) + fields.END + "\n"
    records, unsplit = fields.split_records(broken + text.split(fields.END, 1)[1])
    assert unsplit == [int(job)] and int(job) not in {r.job_id for r in records}


@pytest.mark.parametrize(
    ("printed", "code"),
    [
        ("JobHeldUser", "JobHeldUser"),
        ("None", "None"),
        ("job requeued in held state", "JobHeldUser"),
        ("ReqNodeNotAvail, UnavailableNodes:node4", "ReqNodeNotAvail"),
        ("Burst buffer pre_run error", None),
    ],
)
def test_reason_codes_behind_what_squeue_prints(printed, code):
    assert fields.reason_code(printed) == code


def test_an_unknown_description_takes_its_code_from_squeue_json_once():
    records, _ = fields.split_records((FIX / "fields_squeue_O.txt").read_text())
    r = records[0]
    odd = fields.Record(
        r.job_id,
        tuple(
            "Burst buffer pre_run error" if k == "state_reason" else v
            for k, v in zip([k for _, k in fields.FIELDS], r.values, strict=True)
        ),
    )
    cache = fields.PollCache.empty()
    assert fields.unknown_reasons([odd], cache) == [odd]
    fields.learn_reasons([odd], {"jobs": [{"job_id": r.job_id, "state_reason": "BadConstraints"}]}, cache)
    assert fields.unknown_reasons([odd], cache) == []
    assert cache.reason_of(odd) == "BadConstraints"


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("UNLIMITED", None), ("10:00", 10), ("1:00:00", 60), ("1-02:04:00", 1564), ("2:30:01", 151), ("", None)],
)
def test_time_limits(text, minutes):
    assert fields._minutes(text) == minutes


def test_throttle_of_a_task_string():
    assert fields.throttle_of("0-19%4") == 4
    assert fields.throttle_of("1-3") == 0
    assert fields.throttle_of("") is None
