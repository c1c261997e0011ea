"""`teiresias trace from-sacct` (teiresias/simulator/sacct.py): Slurm
accounting -> Tiresias trace.

The inputs under tests/unit/data/sacct/ are real output of Slurm 22.05.8's
sacct, taken from the project's own local cluster with accounting
(`teiresias cluster up --accounting`, 2 nodes x 4 GPUs), after:
jobs 1-4 failed at once (0 s, GPUs 1/2/4/2); 5-8 completed (3 s, 1/2/4/3
GPUs, 8 waited for 5-7); 9 (4 GPUs) cancelled after 5 s; 10 (1 GPU) ran 3 s,
was requeued (`scontrol requeue`), ran again 8 s; 11 had no GPU; 12 ran on
2 nodes with 8 GPUs; 14-17 completed; 18 (train-a, 8 GPUs) was still running
and 19 held (never in sacct) when sacct ran. The files:
sacct-22.05.json (`sacct -a --json`), sacct-22.05.txt (`sacct -a -X -D
--parsable2 -o JobIDRaw,Cluster,JobName,User,Account,State,Submit,Start,End,
Elapsed,AllocTRES`), sacct-22.05-steps.txt (`sacct -a -D --parsable2 -o
JobID,JobName,State,Submit,Start,End,AllocTRES`: steps listed, no Elapsed).
The live end-to-end test is tests/slurm/test_sacct_replay.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from teiresias.errors import TraceError
from teiresias.simulator.sacct import parse_elapsed, parse_sacct, parse_tres_gpus
from teiresias.simulator.trace import read_trace

DATA = Path(__file__).parent / "data" / "sacct"
JSON_OUT = DATA / "sacct-22.05.json"
PARSABLE_OUT = DATA / "sacct-22.05.txt"
STEPS_OUT = DATA / "sacct-22.05-steps.txt"

# (job_id, gpus, submit_time, duration): what a reader of the sacct output
# above expects; job 10's submit is its first submission (20:48:47, 11 s
# after the first kept job's 20:48:36) and its duration both runs (3 + 8).
EXPECTED = [
    (5, 1, 0, 3),
    (6, 2, 0, 3),
    (7, 4, 0, 3),
    (8, 3, 0, 3),
    (9, 4, 0, 5),
    (10, 1, 11, 11),
    (12, 8, 11, 2),
    (14, 1, 95, 1),
    (15, 2, 104, 20),
    (16, 4, 104, 1),
    (17, 4, 104, 1),
]


def rows(conv) -> list[tuple[int, int, float, float]]:
    return [(j.job_id, j.num_gpus, j.submit_time, j.duration) for j in conv.jobs]


def run(*args: str):
    return CliRunner().invoke(cli, ["trace", "from-sacct", *args])


def test_json_output_becomes_one_row_per_finished_gpu_job():
    conv = parse_sacct(JSON_OUT.read_text(), "sacct.json")
    assert conv.format == "json"
    assert rows(conv) == EXPECTED
    # 18 was running, 11 had no GPU, 1-4 ran 0 s
    assert conv.skipped == {"unfinished": 1, "no GPUs": 1, "never ran": 4}
    assert conv.requeued_jobs == 1 and not conv.renumbered
    assert {(j.model_name, j.user, j.account) for j in conv.jobs} == {("wrap", "root", "root")}
    assert conv.origin == 1795553316  # 2026-11-24T20:48:36Z, job 5's submission


def test_parsable2_output_gives_the_same_trace_as_json():
    conv = parse_sacct(PARSABLE_OUT.read_text(), "sacct.txt")
    assert conv.format == "parsable2"
    assert rows(conv) == EXPECTED
    assert conv.skipped == {"unfinished": 1, "no GPUs": 1, "never ran": 4}


def test_steps_are_skipped_and_run_time_comes_from_start_and_end_without_elapsed():
    conv = parse_sacct(STEPS_OUT.read_text(), "steps.txt")
    assert rows(conv) == EXPECTED
    assert conv.skipped["job steps"] > 0
    # no User/Account columns: left empty, not invented
    assert {(j.user, j.account) for j in conv.jobs} == {("", "")}


def test_requeued_job_last_run_only():
    conv = parse_sacct(JSON_OUT.read_text(), "sacct.json", requeued="last")
    assert dict((j, (s, d)) for j, g, s, d in rows(conv))[10] == (11, 8)


def test_requeued_job_still_waiting_to_run_again_is_unfinished():
    data = json.loads(JSON_OUT.read_text())
    # keep only job 10's REQUEUED record: the state sacct shows between the runs
    data["jobs"] = [j for j in data["jobs"] if j["job_id"] != 10 or j["state"]["current"] == "REQUEUED"]
    conv = parse_sacct(json.dumps(data), "x.json")
    assert 10 not in [j.job_id for j in conv.jobs]
    assert conv.skipped["unfinished"] == 2


def test_reused_job_id_is_two_jobs_and_ids_are_renumbered():
    data = json.loads(JSON_OUT.read_text())
    # the same id on a second cluster (sacct -M all): a different job
    other = json.loads(json.dumps(next(j for j in data["jobs"] if j["job_id"] == 5)))
    other["cluster"] = "other"
    other["time"]["submission"] += 1000
    other["time"]["start"] += 1000
    other["time"]["end"] += 1000
    data["jobs"].append(other)
    conv = parse_sacct(json.dumps(data), "x.json")
    assert conv.renumbered
    assert [j.job_id for j in conv.jobs] == list(range(1, len(EXPECTED) + 2))
    assert conv.jobs[-1].submit_time == 1000


def test_the_written_trace_is_a_valid_trace(tmp_path):
    out = tmp_path / "t.csv"
    r = run(str(JSON_OUT), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["jobs"] == len(EXPECTED) and summary["requeued_jobs"] == 1
    assert summary["skipped"] == {"unfinished": 1, "no GPUs": 1, "never ran": 4}
    jobs = read_trace(out)
    assert [(j.job_id, j.num_gpus, j.submit_time, j.duration) for j in jobs] == EXPECTED
    assert jobs[0].user == "root" and jobs[0].account == "root"


def test_helpers():
    assert parse_tres_gpus("billing=2,cpu=2,gres/gpu=8,node=2") == 8
    assert parse_tres_gpus("cpu=1,gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert parse_tres_gpus("cpu=1,gres/gpu=3,gres/gpu:a100=3") == 3  # the untyped one is the total
    assert parse_tres_gpus("billing=1,cpu=1,node=1") == 0
    assert parse_elapsed("00:00:03") == 3
    assert parse_elapsed("1-02:03:04") == 93784
    assert parse_elapsed("05:06") == 306
    assert parse_elapsed("Unknown") is None


def _one_line_exit_2(r, *needles: str) -> None:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    "name, content, needles",
    [
        ("trace.csv", b"job_id,num_gpu,submit_time\n1,2,3\n", ("trace.csv:1", "not sacct output")),
        ("empty.txt", b"\n\n", ("empty.txt", "empty")),
        ("latin1.txt", PARSABLE_OUT.read_bytes().replace(b"wrap", b"r\xe9sum\xe9"), ("latin1.txt:2", "not UTF-8")),
        ("broken.json", b'{"jobs": [\n{"job_id": 1,\n', ("broken.json:3", "not valid JSON")),
        ("other.json", b'{"nodes": []}', ("other.json", "not `sacct --json` output")),
        ("nojobs.json", b'{"meta": {}, "errors": [], "jobs": []}', ("nojobs.json", "no finished GPU jobs")),
        ("cols.txt", b"JobID|State|Submit\n1|COMPLETED|2024-01-01T00:00:00\n", ("cols.txt:1", "Start, End, AllocTRES")),
        (
            "time.txt",
            b"JobIDRaw|State|Submit|Start|End|AllocTRES\n1|COMPLETED|yesterday|x|y|gres/gpu=1\n",
            ("time.txt:2", "Submit 'yesterday'"),
        ),
        (
            "array.txt",
            b"JobID|State|Submit|Start|End|AllocTRES\n7_1|COMPLETED|2024-01-01T00:00:00|"
            b"2024-01-01T00:00:00|2024-01-01T00:01:00|gres/gpu=1\n",
            ("array.txt:2", "JobIDRaw"),
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, name, content, needles):
    p = tmp_path / name
    p.write_bytes(content)
    _one_line_exit_2(run(str(p), "-o", str(tmp_path / "out.csv")), *needles)
    assert not (tmp_path / "out.csv").exists()


def test_no_gpu_jobs_at_all_is_one_line_exit_2(tmp_path):
    data = json.loads(JSON_OUT.read_text())
    data["jobs"] = [j for j in data["jobs"] if j["job_id"] == 11]  # the job without a GPU
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(data))
    _one_line_exit_2(run(str(p), "-o", str(tmp_path / "out.csv")), "no finished GPU jobs", "1 no GPUs")


def test_missing_input_and_missing_output_folder(tmp_path):
    _one_line_exit_2(run(str(tmp_path / "nope.json"), "-o", str(tmp_path / "o.csv")), "no such file")
    _one_line_exit_2(run(str(JSON_OUT), "-o", str(tmp_path / "no" / "o.csv")), "does not exist")


def test_parse_errors_name_the_source():
    with pytest.raises(TraceError, match=r"^x\.txt:1: not sacct output"):
        parse_sacct("hello\n", "x.txt")


def _newer_shape(job: dict) -> dict:
    """The record in the shape of Slurm 23.02+'s sacct --json (OpenAPI
    v0.0.39+): state.current a list of flags, counts as {set, infinite,
    number}. A transform of the real 22.05 record, not real output: Debian
    12 ships only 22.05, so no newer sacct runs here."""
    job = json.loads(json.dumps(job))
    job["state"]["current"] = [job["state"]["current"]]
    for t in job["tres"]["allocated"]:
        t["count"] = {"set": t["count"] is not None, "infinite": False, "number": t["count"] or 0}
    return job


def test_newer_sacct_json_shape_gives_the_same_trace():
    data = json.loads(JSON_OUT.read_text())
    data["jobs"] = [_newer_shape(j) for j in data["jobs"]]
    conv = parse_sacct(json.dumps(data), "new.json")
    assert rows(conv) == EXPECTED
    assert conv.skipped == {"unfinished": 1, "no GPUs": 1, "never ran": 4}


def test_samples_are_the_jobs_gpu_times_and_read_by_gittins(tmp_path):
    from teiresias.policy.gittins import ServiceDistribution

    out, samples = tmp_path / "t.csv", tmp_path / "gput.csv"
    r = run(str(JSON_OUT), "-o", str(out), "-S", str(samples))
    assert r.exit_code == 0, r.output
    assert sorted(ServiceDistribution.from_samples_file(samples).samples) == sorted(
        float(g * d) for _, g, _, d in EXPECTED
    )


def test_outputs_are_checked_before_reading_and_written_both_or_neither(tmp_path):
    out = tmp_path / "t.csv"
    _one_line_exit_2(run(str(JSON_OUT), "-o", str(out), "-S", str(tmp_path / "no" / "s.csv")), "does not exist")
    assert not out.exists()
    # a bad input leaves no output either, even with both asked for
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    _one_line_exit_2(run(str(bad), "-o", str(out), "-S", str(tmp_path / "s.csv")), "not sacct output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]


def test_a_json_record_without_user_is_named_and_can_take_the_user_parsable2_gives():
    """Issue 21 item 11: Slurm 22.05 writes ``"user": null`` and no association (and no
    uid) for a user without one; the converter names those jobs (no_user) and takes
    the user the CLI read from sacct --parsable2 (live: tests/site/test_site_live.py)."""
    data = json.loads(JSON_OUT.read_text())
    for job in data["jobs"]:
        if job["job_id"] == 5:
            job["user"], job["association"], job["account"] = None, None, None
    text = json.dumps(data)
    conv = parse_sacct(text, "sacct.json")
    assert conv.no_user == (5,)
    assert [j.user for j in conv.jobs if j.job_id == 5] == [""]
    named = parse_sacct(text, "sacct.json", users={5: "u1"})
    assert named.no_user == () and [j.user for j in named.jobs if j.job_id == 5] == ["u1"]
