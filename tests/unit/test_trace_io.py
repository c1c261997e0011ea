"""Reading and writing Tiresias trace CSVs: the format is read unchanged,
every malformed input is one line naming file, line and problem."""

from pathlib import Path

import pytest

from teiresias.domain import Cluster
from teiresias.errors import TraceError
from teiresias.simulator.trace import TraceJob, read_trace, write_trace

HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_the_reference_format_unchanged_and_sorts_by_submit(tmp_path):
    p = write(tmp_path, HEADER + "0,1,30,606,vgg19,164,30\n1,8,0,133,vgg11,147.5,23\n\n")
    jobs = read_trace(p)
    assert [j.job_id for j in jobs] == [1, 0]
    assert jobs[0] == TraceJob(1, 8, 0.0, 147.5, "vgg11", 133, 23.0)


def test_optional_user_and_account_columns(tmp_path):
    p = write(tmp_path, HEADER.strip() + ",user,account\n0,1,0,1,vgg19,10,0,alice,vc-a\n")
    (j,) = read_trace(p)
    assert (j.user, j.account) == ("alice", "vc-a")


def test_write_then_read_round_trips(tmp_path):
    jobs = [TraceJob(0, 2, 0.0, 10.0, "resnet50", 5, 3.0), TraceJob(1, 1, 3.0, 7.5, "vgg16", 2, 0.0, "bob", "vc")]
    p = tmp_path / "out.csv"
    write_trace(p, jobs)
    assert p.read_text().splitlines()[0] == HEADER.strip() + ",user,account"
    assert read_trace(p) == jobs
    assert not list(tmp_path.glob(".out.csv.*"))  # no temp file left behind


def test_reference_60_job_trace_is_accepted():
    jobs = read_trace(FIXTURES / "tiresias-60_job.csv")
    assert len(jobs) == 60 and {j.model_name for j in jobs} >= {"vgg19", "resnet50", "alexnet"}


@pytest.mark.parametrize(
    "body,expected",
    [
        ("", "t.csv:1: empty trace"),
        (HEADER, "t.csv:2: trace has a header but no jobs"),
        (
            "job_id,num_gpu,submit_time,iterations,model_name,interval\n0,1,0,1,a,1\n",
            "t.csv:1: missing column duration",
        ),
        (HEADER + "0,1,0,1,a,10,0\n1,-2,5,1,a,10,0\n", "t.csv:3: num_gpu must be > 0, got '-2'"),
        (HEADER + "0,0,0,1,a,10,0\n", "t.csv:2: num_gpu must be > 0, got '0'"),
        (HEADER + "0,1.5,0,1,a,10,0\n", "t.csv:2: num_gpu must be an integer, got '1.5'"),
        (HEADER + "0,1,soon,1,a,10,0\n", "t.csv:2: submit_time must be a number, got 'soon'"),
        (HEADER + "0,1,0,1,a,nan,0\n", "t.csv:2: duration must be a number, got 'nan'"),
        (HEADER + "0,1,0,1,a,0,0\n", "t.csv:2: duration must be > 0, got '0'"),
        (HEADER + "0,1,-1,1,a,10,0\n", "t.csv:2: submit_time must be >= 0, got '-1'"),
        (HEADER + "0,1,0,1,a,10,0\n0,1,0,1,a,10,0\n", "t.csv:3: duplicate job_id 0 (first on line 2)"),
        (HEADER + "0,1,0,1\n", "t.csv:2: 4 fields, header has 7"),
    ],
)
def test_bad_trace_is_one_line_with_file_and_line(tmp_path, body, expected):
    p = write(tmp_path, body)
    with pytest.raises(TraceError) as err:
        read_trace(p)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path}/{expected}")


def test_job_larger_than_cluster_names_the_line(tmp_path):
    p = write(tmp_path, HEADER + "0,4,0,1,a,10,0\n7,16,5,1,a,10,0\n")
    with pytest.raises(TraceError, match=r"t\.csv:3: job 7 needs 16 GPUs but the cluster has only 8"):
        read_trace(p, Cluster.from_tiresias_spec(1, 2, 4))


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace: no such file"):
        read_trace(tmp_path / "nope.csv")
