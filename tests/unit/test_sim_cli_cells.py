"""`teiresias simulate --cells`: the same rankers inside HiveD virtual clusters."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from teiresias.cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "etc" / "cluster.yaml"
CELLS = ROOT / "etc" / "cells.example.yaml"

# team-b floods the 16 GPUs with 1-GPU jobs first; team-a (quota: one whole node)
# then asks for a 4-GPU job. Under plain las it waits for team-b's jobs to end;
# inside its VC it is guaranteed a node and preempts team-b's opportunistic jobs.
HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval,account\n"
ROWS = "".join(f"{i},1,0,100,resnet50,1000,10,team-b\n" for i in range(16)) + "16,4,10,100,resnet50,100,10,team-a\n"


def _run(tmp_path: Path, *extra: str):
    trace = tmp_path / "tenants.csv"
    trace.write_text(HEADER + ROWS)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "-t",
            str(trace),
            "-c",
            str(CLUSTER),
            "-p",
            "las",
            "-i",
            "10",
            "--jobs-csv",
            str(tmp_path / "jobs.csv"),
            "--json",
            str(out),
            *extra,
        ],
    )
    return result, out


def _delay_of_job_16(tmp_path: Path) -> float:
    rows = (tmp_path / "jobs.csv").read_text().splitlines()
    header = rows[0].split(",")
    for row in rows[1:]:
        cols = dict(zip(header, row.split(",")))
        if cols["job_id"] == "16":
            return float(cols["queue_delay"])
    raise AssertionError("job 16 missing from the per-job CSV")


def test_guaranteed_vc_job_does_not_wait_behind_other_tenants(tmp_path):
    plain, _ = _run(tmp_path)
    assert plain.exit_code == 0, plain.output
    plain_delay = _delay_of_job_16(tmp_path)

    cells, out = _run(tmp_path, "--cells", str(CELLS))
    assert cells.exit_code == 0, cells.output
    summary = json.loads(out.read_text())
    assert summary[0]["policy"] == "cells+las"
    cells_delay = _delay_of_job_16(tmp_path)
    assert plain_delay >= 900, "without VCs the 4-GPU job waits for team-b's 1000 s jobs"
    assert cells_delay <= 20, "inside vc-a's quota it starts at the next round"
    assert summary[0]["preemptions"] >= 4


def test_bad_cells_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "cells.yaml"
    bad.write_text(CELLS.read_text().replace("node[1-2]", "node[7-8]"))
    result, out = _run(tmp_path, "--cells", str(bad))
    assert result.exit_code == 2
    assert "node7" in result.output or "node[7-8]" in result.output
    assert not out.exists()
