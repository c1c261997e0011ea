"""`teiresias simulate` end to end through the real command group: outputs,
exit codes, and bad input (one line naming file, line and problem; exit 2;
no output file created or clobbered)."""

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from teiresias.cli import cli

HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
GOOD = HEADER + "".join(
    f"{i},{1 + i % 4},{i * 20},10,{'vgg16' if i % 2 else 'resnet50'},{100 + 37 * i},20\n" for i in range(12)
)
SPEC = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,4,8,64\n"
REQUIRED_KEYS = {
    "policy",
    "jobs",
    "avg_jct",
    "median_jct",
    "p95_jct",
    "avg_queue_delay",
    "makespan",
    "preemptions",
    "gpu_utilization",
    "wall_seconds",
}


@pytest.fixture
def files(tmp_path: Path):
    (tmp_path / "trace.csv").write_text(GOOD)
    (tmp_path / "spec.csv").write_text(SPEC)
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args])


def test_several_policies_print_tables_and_write_every_output(files):
    out = files / "out"
    out.mkdir()
    r = invoke(
        "-t",
        str(files / "trace.csv"),
        "-c",
        str(files / "spec.csv"),
        "-p",
        "las,best-effort,fifo",
        "--queues",
        "200",
        "--preempt-overhead",
        "5",
        "--interval",
        "10",
        "--json",
        str(out / "s.json"),
        "--jobs-csv",
        str(out / "jobs.csv"),
        "--plot",
        str(out / "p.png"),
    )
    assert r.exit_code == 0, r.output
    assert "normalised to las" in r.output and "best-effort" in r.output
    summaries = json.loads((out / "s.json").read_text())
    assert [s["policy"] for s in summaries] == ["las", "best-effort", "fifo"]
    for s in summaries:
        assert REQUIRED_KEYS <= s.keys() and s["jobs"] == 12 and s["seed"] == 0
    rows = list(csv.DictReader((out / "jobs.csv").open()))
    assert len(rows) == 36
    assert {"policy", "job_id", "gpus", "submit", "start", "end", "jct", "queue_delay", "preemptions", "nodes"} <= rows[
        0
    ].keys()
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*.tmp"))


def test_json_to_stdout(files):
    r = CliRunner().invoke(
        cli, ["simulate", "-t", str(files / "trace.csv"), "-c", str(files / "spec.csv"), "-p", "fifo", "--json", "-"]
    )
    assert r.exit_code == 0
    # click's runner mixes stderr in; the JSON list is the last thing printed.
    data = json.loads(r.stdout[r.stdout.index("[\n") :])
    assert data[0]["policy"] == "fifo" and REQUIRED_KEYS <= data[0].keys()


def test_yaml_cluster_and_gittins_samples(files):
    (files / "c.yaml").write_text("gpus_per_node: 4\nswitches:\n  - name: a\n    nodes: [n1, n2]\n")
    (files / "gput.csv").write_text("duration\n" + "".join(f"{100 * k}\n" for k in range(1, 50)))
    r = invoke(
        "-t",
        str(files / "trace.csv"),
        "-c",
        str(files / "c.yaml"),
        "-p",
        "gittins,las",
        "-g",
        str(files / "gput.csv"),
        "--json",
        str(files / "o.json"),
    )
    assert r.exit_code == 0, r.output
    assert [s["policy"] for s in json.loads((files / "o.json").read_text())] == ["gittins", "las"]


BAD_TRACES = {
    "missing column": (HEADER.replace(",duration", "") + "0,1,0,1,a,1\n", ":1: missing column duration"),
    "negative gpus": (HEADER + "0,1,0,1,a,10,0\n1,-3,0,1,a,10,0\n", ":3: num_gpu must be > 0, got '-3'"),
    "larger than cluster": (
        HEADER + "0,1,0,1,a,10,0\n5,16,0,1,a,10,0\n",
        ":3: job 5 needs 16 GPUs but the cluster has only 8",
    ),
    "non-numeric time": (HEADER + "0,1,noon,1,a,10,0\n", ":2: submit_time must be a number, got 'noon'"),
    "empty file": ("", ":1: empty trace"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_is_one_line_exit_2_and_nothing_written(files, case):
    body, problem = BAD_TRACES[case]
    bad = files / "bad.csv"
    bad.write_text(body)
    keep = files / "keep.json"
    keep.write_text("previous results\n")
    r = invoke(
        "-t",
        str(bad),
        "-c",
        str(files / "spec.csv"),
        "-p",
        "las,fifo",
        "--json",
        str(keep),
        "--jobs-csv",
        str(files / "jobs.csv"),
        "--plot",
        str(files / "p.png"),
    )
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"teiresias: error: {bad}{problem}")
    assert keep.read_text() == "previous results\n"
    assert not (files / "jobs.csv").exists() and not (files / "p.png").exists()
    assert sorted(p.name for p in files.iterdir()) == ["bad.csv", "keep.json", "spec.csv", "trace.csv"]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["-p", "las,lottery"],
            "unknown policy 'lottery'; choose from: fifo, best-effort, sjf, srtf, srsf, las, gittins",
        ),
        (["-p", "fifo", "--queue-order", "lifo-resume"], "orders las/gittins queues; add las or gittins"),
        (["--queues", "3600,abc"], "--queues '3600,abc': give GPU-second thresholds"),
        (["--queues", "7200,3600"], "must be positive and strictly increasing"),
        (["--interval", "-1"], "--interval -1.0 must be >= 0"),
        (["--preempt-overhead", "-5"], "--preempt-overhead -5.0 must be >= 0"),
        (["-g", "/nonexistent/samples.csv", "-p", "gittins"], "/nonexistent/samples.csv"),
    ],
)
def test_bad_options_are_one_line_exit_2(files, args, message):
    r = invoke("-t", str(files / "trace.csv"), "-c", str(files / "spec.csv"), *args, "--json", str(files / "o.json"))
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("teiresias: error: ") and message in lines[0]
    assert not (files / "o.json").exists()


def test_bad_cluster_spec_names_the_file(files):
    (files / "bad.csv").write_text("num_switch,num_gpu_p_node\n1,4\n")
    r = invoke("-t", str(files / "trace.csv"), "-c", str(files / "bad.csv"))
    assert r.exit_code == 2
    assert f"{files / 'bad.csv'}:1: missing column num_node_p_switch" in r.output


def test_unknown_placement_is_a_usage_error(files):
    r = invoke("-t", str(files / "trace.csv"), "-c", str(files / "spec.csv"), "--placement", "random")
    assert r.exit_code == 2 and "consolidate" in r.output


def test_help_has_an_example():
    r = invoke("--help")
    assert r.exit_code == 0 and "Example" in r.output and "--preempt-overhead" in r.output


def test_outputs_are_all_or_nothing(tmp_path):
    """A failure while writing outputs (e.g. the plot) leaves no output and no temp file."""
    from teiresias.outputs import StagedOutputs

    (tmp_path / "a.json").write_text("old")
    with pytest.raises(RuntimeError):
        with StagedOutputs() as staged:
            with staged.open(tmp_path / "a.json") as fh:
                fh.write("new")
            with staged.open(tmp_path / "b.csv") as fh:
                fh.write("rows")
            raise RuntimeError("plotting failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "old"


def test_fig7_through_the_command_line(tmp_path):
    """--continuous, --interval and --slowdown none reach the policy and the engine."""
    (tmp_path / "t.csv").write_text(HEADER + "1,2,0,1,vgg16,2,0\n2,1,0,1,vgg16,8,0\n3,2,0,1,vgg16,6,0\n")
    (tmp_path / "c.csv").write_text("num_switch,num_node_p_switch,num_gpu_p_node\n1,1,2\n")
    r = invoke(
        "-t",
        str(tmp_path / "t.csv"),
        "-c",
        str(tmp_path / "c.csv"),
        "-p",
        "srsf,las",
        "--continuous",
        "--interval",
        "1",
        "--slowdown",
        "none",
        "--json",
        str(tmp_path / "o.json"),
    )
    assert r.exit_code == 0, r.output
    avg = {s["policy"]: s["avg_jct"] for s in json.loads((tmp_path / "o.json").read_text())}
    assert avg == {"srsf": pytest.approx(28 / 3), "las": pytest.approx(35 / 3)}


def test_last_queue_gittins_through_the_command_line(files):
    # A heavy tail and a backlog, so jobs wait in the last queue and its order matters.
    (files / "busy.csv").write_text(
        HEADER
        + "".join(f"{i},{1 + i % 4},{i * 5},10,resnet50,{200 if i % 3 else 5000 + 300 * i},20\n" for i in range(30))
    )
    (files / "gput.csv").write_text("duration\n" + "".join(f"{50 * k * k}\n" for k in range(1, 60)))
    base = [
        "-t",
        str(files / "busy.csv"),
        "-c",
        str(files / "spec.csv"),
        "-p",
        "gittins",
        "--queues",
        "400",
        "-g",
        str(files / "gput.csv"),
        "--queue-order",
        "fifo",
        "--json",
        "-",
    ]
    fifo = invoke(*base, "--last-queue", "fifo")
    idx = invoke(*base)  # the default: the index
    assert fifo.exit_code == 0 and idx.exit_code == 0, fifo.output + idx.output
    a, b = json.loads(fifo.stdout)[0], json.loads(idx.stdout)[0]
    assert a["policy"] == b["policy"] == "gittins"
    assert a["avg_jct"] != b["avg_jct"]  # the last queue's order changed the schedule
    r = invoke("-t", str(files / "trace.csv"), "-c", str(files / "spec.csv"), "-p", "las", "--last-queue", "gittins")
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "add gittins to --policy" in lines[0]
