"""Golden-file replay: a 12-job trace on 2 nodes x 4 GPUs under las, gittins,
srtf, best-effort and fifo with preemption overhead and placement slowdown.

Any change in what the simulator or a policy decides shows up as a diff of
the per-job CSV, one line per job and policy, e.g.::

    -las,6,4,resnet152,300,300,1200,900,0,0,0,0,s0n1
    +las,6,4,resnet152,300,420,1320,1020,120,0,0,0,s0n0

reads "under las, job 6 now starts at 420 instead of 300". If the change is
intended, regenerate with ``UPDATE_GOLDEN=1`` and review the diff in git.
Paths are relative to this file so the test survives moves of the checkout.
"""

import difflib
import json
import os
from pathlib import Path

from click.testing import CliRunner

from teiresias.cli import cli

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "fixtures" / "traces"
ARGS = [
    "-p",
    "las,gittins,srtf,best-effort,fifo",
    "--queues",
    "400",
    "--preempt-overhead",
    "30",
    "--interval",
    "30",
    "--placement",
    "profile",
]


def _explain(name: str, expected: str, got: str) -> str:
    diff = "".join(
        difflib.unified_diff(expected.splitlines(True), got.splitlines(True), f"expected/{name}", f"got/{name}", n=0)
    )
    return (
        f"{name} differs from the golden file (header: "
        f"{expected.splitlines()[0] if expected else '?'}).\n{diff}\n"
        "If intended: UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_sim_golden.py"
    )


def test_golden_replay(tmp_path):
    samples = tmp_path / "gput.csv"
    # A small GPU-time distribution for gittins: the trace's own job sizes' order of magnitude.
    samples.write_text("duration\n" + "".join(f"{v}\n" for v in (60, 120, 300, 500, 900, 1600, 3000, 6000)))
    r = CliRunner().invoke(
        cli,
        [
            "simulate",
            "-t",
            str(FIX / "golden_trace.csv"),
            "-c",
            str(FIX / "golden_cluster.csv"),
            *ARGS,
            "-g",
            str(samples),
            "--jobs-csv",
            str(tmp_path / "jobs.csv"),
            "--json",
            str(tmp_path / "s.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    got_jobs = (tmp_path / "jobs.csv").read_text()
    summaries = json.loads((tmp_path / "s.json").read_text())
    for s in summaries:
        s.pop("wall_seconds")  # the only non-deterministic figure
    got_summary = json.dumps(summaries, indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN"):
        (FIX / "golden_jobs.csv").write_text(got_jobs)
        (FIX / "golden_summary.json").write_text(got_summary)
    want_jobs = (FIX / "golden_jobs.csv").read_text()
    want_summary = (FIX / "golden_summary.json").read_text()
    assert got_jobs == want_jobs, _explain("golden_jobs.csv", want_jobs, got_jobs)
    assert got_summary == want_summary, _explain("golden_summary.json", want_summary, got_summary)
