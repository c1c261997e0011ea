"""`teiresias simulate --sweep SPEC.yaml` with the local process pool: the spec's axes expand into
runs without duplicates, each row is the very replay `simulate` makes of that run, outputs are one
table (JSON, CSV, plot), and a bad spec is one line naming the file and key (exit 2).
The Slurm job array (--on-slurm) runs on the real local cluster: tests/slurm/test_sweep_on_slurm.py."""

import csv
import json

import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from teiresias.simulator import sweep
from tests.conftest import REPO

SAMPLES = REPO / "teiresias" / "data" / "yarn-gput1000.csv"
SPEC = f"""\
cluster: {REPO / "etc" / "cluster.yaml"}
synth: {{samples: {SAMPLES}, jobs: 40, loads: [1, 2, 4], seeds: [0]}}
gittins_samples: {SAMPLES}
policies: [srsf, las, gittins]
last_queue: [fifo, gittins]
preempt_overhead: 30
"""


def invoke(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


def test_a_twelve_run_sweep_merges_the_same_replays_simulate_makes(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    r = invoke(
        "--sweep",
        str(tmp_path / "s.yaml"),
        "--workers",
        "2",
        "--workdir",
        str(tmp_path / "wd"),
        "--json",
        str(tmp_path / "o.json"),
        "--csv",
        str(tmp_path / "o.csv"),
        "--plot",
        str(tmp_path / "o.png"),
    )
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "o.json").read_text())
    # 3 traces x (srsf + las + gittins with 2 last-queue orders): last_queue is not multiplied out for others.
    assert len(rows) == 12 and [x["index"] for x in rows] == list(range(12))
    assert sorted({(x["policy"], x["last_queue"]) for x in rows}) == [
        ("gittins", "fifo"),
        ("gittins", "gittins"),
        ("las", "fifo"),
        ("srsf", "fifo"),
    ]
    with open(tmp_path / "o.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 12
    assert (tmp_path / "o.png").read_bytes().startswith(b"\x89PNG")
    assert all(
        x["avg_jct_vs_srsf"]
        == pytest.approx(
            x["avg_jct"] / next(y["avg_jct"] for y in rows if y["policy"] == "srsf" and y["trace"] == x["trace"])
        )
        for x in rows
    )
    # Each row is what `simulate` prints for that trace and knobs.
    for x in (rows[3], rows[11]):
        assert x["policy"] == "gittins" and x["last_queue"] == "gittins"
        one = invoke(
            "-t",
            x["trace"],
            "-c",
            str(REPO / "etc" / "cluster.yaml"),
            "-p",
            "gittins",
            "-g",
            str(SAMPLES),
            "--last-queue",
            "gittins",
            "-o",
            "30",
            "--json",
            "-",
        )
        assert one.exit_code == 0, one.output
        single = json.loads(one.stdout)[0]
        assert {k: single[k] for k in ("avg_jct", "p95_jct", "preemptions")} == {
            k: x[k] for k in ("avg_jct", "p95_jct", "preemptions")
        }


def test_pool_and_serial_runs_agree(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    runs = sweep.expand(sweep.load_spec(tmp_path / "s.yaml"), tmp_path / "wd")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_seconds"} for r in rows]  # noqa: E731
    assert strip(sweep.run_local(runs[:4], workers=2)) == strip(sweep.run_local(runs[:4], workers=1))


@pytest.mark.parametrize(
    "text,needle",
    [
        (SPEC + "colour: blue\n", "unknown key 'colour'"),
        (
            SPEC.replace("policies: [srsf, las, gittins]", "policies: [srsf, lottery]"),
            "policies[1]: unknown policy 'lottery'",
        ),
        (SPEC.replace("preempt_overhead: 30", "preempt_overhead: soon"), "preempt_overhead[0]: must be a number"),
        (SPEC.replace("last_queue: [fifo, gittins]", "last_queue: [lifo]"), "last_queue[0]: must be fifo or gittins"),
        (SPEC.replace("jobs: 40", "jbs: 40"), "unknown key 'synth.jbs'"),
        (SPEC.replace(f"gittins_samples: {SAMPLES}\n", ""), "gittins_samples: missing"),
        ("policies: [las]\n", "cluster: missing"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_key(tmp_path, text, needle):
    (tmp_path / "s.yaml").write_text(text)
    r = invoke(
        "--sweep", str(tmp_path / "s.yaml"), "--workdir", str(tmp_path / "wd"), "--json", str(tmp_path / "o.json")
    )
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"teiresias: error: {tmp_path / 's.yaml'}") and needle in lines[0]
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--on-slurm"], "--on-slurm goes with --sweep"),
        (["--csv", "x.csv"], "--csv goes with --sweep"),
        ([], "missing -t/--trace"),
    ],
)
def test_sweep_flags_without_a_sweep_and_a_missing_trace_are_one_line(args, needle):
    r = invoke(*args)
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.output


def test_auto_queues_and_preempt_cost_are_axes(tmp_path):
    (tmp_path / "s.yaml").write_text(
        SPEC.replace("policies: [srsf, las, gittins]", "policies: [las, gittins]")
        .replace("last_queue: [fifo, gittins]", "queues: [[3600], auto]\npreempt_cost: [0, 30]")
        .replace("loads: [1, 2, 4]", "loads: [4]")
    )
    runs = sweep.expand(sweep.load_spec(tmp_path / "s.yaml"), tmp_path / "wd")
    # las: 2 queue settings; gittins: 2 queue settings x 2 costs.
    assert [(r.policy, r.queues, r.preempt_cost) for r in runs] == [
        ("las", (3600.0,), 0.0),
        ("las", "auto", 0.0),
        ("gittins", (3600.0,), 0.0),
        ("gittins", (3600.0,), 30.0),
        ("gittins", "auto", 0.0),
        ("gittins", "auto", 30.0),
    ]
    from teiresias.policy.gittins import ServiceDistribution
    from teiresias.policy.thresholds import fit_thresholds

    row = sweep.run_one(runs[1])
    assert (
        row["queues_auto"]
        and tuple(row["queues"]) == fit_thresholds(ServiceDistribution.from_samples_file(SAMPLES)).thresholds
    )
