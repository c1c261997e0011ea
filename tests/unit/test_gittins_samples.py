"""Reading GPU-time samples (the reference simulator's yarn-gput*.csv format)."""

from pathlib import Path

import pytest

from teiresias.errors import TraceError
from teiresias.policy.gittins import ServiceDistribution

SHARED = Path("/work/shared/traces/tiresias-yarn-gput1000.csv")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "samples.csv"
    p.write_text(text)
    return p


def test_reads_a_duration_column(tmp_path) -> None:
    d = ServiceDistribution.from_samples_file(write(tmp_path, "duration\n12\n4\n\n8.5\n"))
    assert d.samples == (4.0, 8.5, 12.0)


def test_reads_the_duration_column_among_others(tmp_path) -> None:
    d = ServiceDistribution.from_samples_file(write(tmp_path, "job,duration\na,3\nb,5\n"))
    assert d.samples == (3.0, 5.0)


@pytest.mark.skipif(not SHARED.exists(), reason="shared Tiresias samples not present")
def test_reads_the_reference_samples_file() -> None:
    d = ServiceDistribution.from_samples_file(SHARED)
    assert len(d) == 1001 and d.index(0, 3600) > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file"),
        ("gputime\n3\n", ":1: no 'duration' column"),
        ("duration\n3\nabc\n", ":3: duration 'abc' is not a number"),
        ("duration\n3\n-2\n", ":3: duration '-2' must be a positive number"),
        ("duration\n3\n0\n", ":3: duration '0' must be a positive number"),
        ("duration\n", "no GPU-time samples"),
    ],
)
def test_bad_samples_name_file_and_line(tmp_path, text, message) -> None:
    p = write(tmp_path, text)
    with pytest.raises(TraceError) as err:
        ServiceDistribution.from_samples_file(p)
    assert str(p) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_is_a_trace_error(tmp_path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        ServiceDistribution.from_samples_file(tmp_path / "nope.csv")
