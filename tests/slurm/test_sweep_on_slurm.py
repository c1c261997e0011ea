"""`teiresias simulate --sweep SPEC --on-slurm` on the real local Slurm: a 12-run sweep submitted
as ONE job array (sbatch --wait) to the partition the controller does not manage (`other`; no
controller runs here at all), each task replaying its run on a node and writing its row; the
merged table must equal the same sweep run in local processes, row for row. A partition Slurm
does not know is refused by the real sbatch: one line, exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from teiresias.simulator import sweep
from tests.conftest import REPO

pytestmark = pytest.mark.slurm

SAMPLES = REPO / "teiresias" / "data" / "yarn-gput1000.csv"
TEIRESIAS = REPO / ".venv" / "bin" / "teiresias"


def spec(dirpath: Path) -> Path:
    p = dirpath / "sweep.yaml"
    p.write_text(f"""\
cluster: {REPO / "etc" / "cluster.yaml"}
synth: {{samples: {SAMPLES}, jobs: 40, loads: [1, 2, 4], seeds: [0]}}
gittins_samples: {SAMPLES}
policies: [srsf, las, gittins]
last_queue: [fifo, gittins]
preempt_overhead: 30
""")
    return p


def test_a_twelve_run_sweep_as_one_job_array_matches_local_processes(clean_slurm):
    c = clean_slurm
    # Array tasks run on the nodes: the work folder must be readable and writable there.
    work = c.jobs_dir / f"sweep-test-{os.getpid()}"
    work.mkdir(mode=0o777, exist_ok=True)
    s = spec(work)
    out = work / "all.json"
    r = subprocess.run(
        [
            str(TEIRESIAS),
            "simulate",
            "--sweep",
            str(s),
            "--on-slurm",
            "--partition",
            "other",
            "--workdir",
            str(work / "wd"),
            "--json",
            str(out),
            "--csv",
            str(work / "all.csv"),
            "--plot",
            str(work / "all.png"),
        ],
        env=c.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "12 runs on a Slurm job array on partition other" in r.stdout
    job_id = next(ln.split()[2].rstrip(":") for ln in r.stdout.splitlines() if ln.startswith("array job "))
    rows = json.loads(out.read_text())
    assert len(rows) == 12
    # One result and one log per array task: the tasks really ran under Slurm.
    assert sorted(p.name for p in (work / "wd" / "results").iterdir()) == sorted(f"{i}.json" for i in range(12))
    assert len(list((work / "wd" / "logs").glob("*.out"))) == 12
    # The array ran on the partition asked for: Slurm's record of it (scontrol knows it for a while).
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=c.env, capture_output=True, text=True)
    if shown.returncode == 0:  # MinJobAge may already have purged it; the files above are the proof then
        assert "Partition=other" in shown.stdout and "ArrayJobId=" in shown.stdout
    # Same runs in local processes: the same figures.
    local = sweep.add_ratios(sweep.run_local(sweep.expand(sweep.load_spec(s), work / "wd-local"), workers=2))
    keys = ("policy", "last_queue", "preempt_overhead", "jobs", "avg_jct", "p95_jct", "preemptions", "makespan")
    assert [{k: x[k] for k in keys} for x in rows] == [{k: x[k] for k in keys} for x in local]
    assert [x["trace_label"] for x in rows] == [x["trace_label"] for x in local]
    assert (work / "all.png").read_bytes().startswith(b"\x89PNG")
    shutil.rmtree(work)  # kept when the test fails: the tasks' logs are in it


def test_a_partition_slurm_does_not_know_is_one_line_exit_2(clean_slurm, tmp_path):
    c = clean_slurm
    work = c.jobs_dir / f"sweep-bad-{os.getpid()}"
    work.mkdir(mode=0o777, exist_ok=True)
    r = subprocess.run(
        [
            str(TEIRESIAS),
            "simulate",
            "--sweep",
            str(spec(work)),
            "--on-slurm",
            "--partition",
            "nosuch",
            "--workdir",
            str(work / "wd"),
        ],
        env=c.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "sbatch refused the array" in err[0] and "partition" in err[0].lower(), r.stderr
    shutil.rmtree(work)
