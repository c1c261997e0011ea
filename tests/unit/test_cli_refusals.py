"""Input the commands used to accept and silently ignore (issue 23 item 10), each
now one line, exit 2, before any work: an option a mode does not read, a
string where the sweep spec wants a list, a time no trace can mean, a row with
more fields than its header. (tsbatch's ``-G 0`` and ``--checkpoint-dir
/nonexistent``: tests/slurm/test_wrapper_sbatch.py, on the real cluster.)

Everything runs through the real ``teiresias`` command group on real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from tests.conftest import REPO

HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
CLUSTER = str(REPO / "etc" / "cluster.yaml")
SAMPLES = str(REPO / "teiresias" / "data" / "yarn-gput1000.csv")


def refused(*args: str) -> str:
    """The command's one error line (exit 2, nothing else printed)."""
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("teiresias: error: ") and "Traceback" not in r.output, r.output
    return lines[0]


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    (tmp_path / "t.csv").write_text(HEADER + "1,1,0,1,vgg16,100,0\n2,2,5,1,vgg16,50,0\n")
    p = tmp_path / "s.yaml"
    p.write_text(f"cluster: {CLUSTER}\ntraces: [t.csv]\npolicies: [fifo]\n")
    return p


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-t", "x.csv"], "-t/--trace"),
        (["-p", "las,fifo"], "-p/--policy"),
        (["--interval", "10"], "-i/--interval"),
        (["--queues", "600"], "-q/--queues"),
    ],
)
def test_single_run_options_beside_a_sweep_are_refused(spec: Path, args: list[str], flag: str) -> None:
    line = refused("simulate", "--sweep", str(spec), "--workdir", str(spec.parent / "wd"), *args)
    assert f"{flag} is an option of a single replay and --sweep would ignore it" in line
    assert not (spec.parent / "wd").exists()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("policies: las\n", "policies: must be a list, e.g. [las]; got the string 'las'"),
        ("policies: [las]\ntraces: t.csv\n", "traces: must be a list, e.g. [t.csv]"),
        ("policies: [las]\nlast_queue: fifo\n", "last_queue: must be a list"),
    ],
)
def test_a_string_where_the_sweep_spec_wants_a_list_is_refused(spec: Path, text: str, needle: str) -> None:
    body = spec.read_text().replace("policies: [fifo]\n", "")
    if "traces:" in text:
        body = body.replace("traces: [t.csv]\n", "")
    spec.write_text(body + text)
    assert needle in refused("simulate", "--sweep", str(spec), "--workdir", str(spec.parent / "wd"))


def test_one_bare_number_still_stands_for_a_one_item_list(spec: Path) -> None:
    spec.write_text(spec.read_text() + "preempt_overhead: 30\n")
    r = CliRunner().invoke(cli, ["simulate", "--sweep", str(spec), "--workdir", str(spec.parent / "wd")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-c", CLUSTER, "-G", "64"], "give -c/--cluster"),
        (["-k", "philly", "-S", SAMPLES, "-c", CLUSTER, "-G", "64"], "not both"),
        (["-n", "50"], "-n/--jobs is read by --kind philly only"),
        (["--load", "2"], "-l/--load is read by --kind philly only"),
        (["-k", "philly", "-S", SAMPLES, "-G", "8", "--mean-interarrival", "5"], "is read by --kind testbed only"),
    ],
)
def test_trace_synth_refuses_an_option_it_would_ignore(tmp_path: Path, args: list[str], needle: str) -> None:
    assert needle in refused("trace", "synth", *args, "-o", str(tmp_path / "t.csv"))
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("1,1,0,1,vgg16,1e300,0", "t.csv:2: duration must be <= 1e+09 seconds"),
        ("1,1,1e300,1,vgg16,100,0", "t.csv:2: submit_time must be <= 1e+09 seconds"),
        ("1,1,0,1,vgg16,100,1e12", "t.csv:2: interval must be <= 1e+09 seconds"),
        ("1,1,0,1,vgg16,100,0,extra", "t.csv:2: 8 fields, header has 7"),
    ],
)
def test_a_trace_row_no_replay_can_mean_is_refused(tmp_path: Path, row: str, needle: str) -> None:
    (tmp_path / "t.csv").write_text(HEADER + row + "\n")
    assert needle in refused("trace", "check", str(tmp_path / "t.csv"))
    assert needle in refused("simulate", "-t", str(tmp_path / "t.csv"), "-c", CLUSTER)


def test_times_up_to_the_bound_are_read(tmp_path: Path) -> None:
    """Philly's GPU-time samples reach 5.3e7 s: a one-GPU job that long is a valid trace."""
    (tmp_path / "t.csv").write_text(HEADER + "1,1,0,1,vgg16,53000000,0\n2,1,1000000000,1,vgg16,10,0\n")
    r = CliRunner().invoke(cli, ["trace", "check", str(tmp_path / "t.csv")])
    assert r.exit_code == 0, r.output
