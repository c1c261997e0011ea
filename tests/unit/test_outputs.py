"""The files the commands write (teiresias/outputs.py; issue 23 items 7 and 8).

Item 7: a device or a FIFO is written through, never renamed over; a symbolic
link is followed (the link stays, its target gets the bytes); an output that
is an input, or two outputs naming one file, are refused; a rewritten file
keeps its mode. Item 8: an output that cannot be written (a read-only file
system, an immutable folder) is found before the replay, and a failure while
writing (a full file system, /dev/full, standard output on /dev/full) is one
line, exit 2, with no temporary file left.

Everything runs through the real command group (click's runner) or, for
standard output, the installed ``teiresias`` program, on real files, real
FIFOs, real device nodes (mknod), a real read-only and a real full tmpfs, and a
real immutable folder (chattr +i); the last four need root and are skipped
without it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from teiresias.cli import cli

TEIRESIAS = Path(sys.executable).with_name("teiresias")
HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
TRACE = HEADER + "".join(f"{i},{1 + i % 2},{i * 10},1,vgg16,{50 + 10 * i},0\n" for i in range(40))
SPEC = "num_switch,num_node_p_switch,num_gpu_p_node\n1,2,4\n"
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mknod, mount and chattr need root")


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "c.csv").write_text(SPEC)
    return tmp_path


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def simulate(d: Path, *outputs: str):
    return run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), *outputs)


def one_error_line(r) -> str:
    """Exit 2 and exactly one line, no traceback (nothing printed before: checked first)."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("teiresias: error: "), r.output
    return lines[0]


def error_after_the_replay(r) -> str:
    """Exit 2, the replay's tables then one error line, no traceback; that line."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert "Traceback" not in r.output and sum("error" in ln for ln in lines) == 1, r.output
    assert lines[-1].startswith("teiresias: error: "), r.output
    return lines[-1]


def litter(folder: Path) -> list[str]:
    """Temporary or probe files left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp"))


# -- item 7: what is there is written through, followed or kept --------------------------


def test_a_fifo_is_written_through_not_replaced(d: Path) -> None:
    fifo = d / "out.fifo"
    os.mkfifo(fifo)
    # The read end open first (non-blocking), so the writer never waits; the summary fits the pipe.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        r = simulate(d, "--json", str(fifo))
        try:
            got = os.read(fd, 1 << 16)
        except BlockingIOError:
            got = b""
    finally:
        os.close(fd)
    assert r.exit_code == 0, r.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got.lstrip().startswith(b"[") and b'"policy": "gittins"' in got  # the default policy


def test_a_link_to_standard_output_writes_to_the_pipe(d: Path) -> None:
    """What ``-o /dev/stdout`` does (/dev/stdout -> /proc/self/fd/1, a pipe with no path of
    its own), on a twin of the link in tmp: the real one must never be at stake."""
    link = d / "stdout"
    link.symlink_to("/proc/self/fd/1")
    r = subprocess.run([str(TEIRESIAS), "trace", "synth", "-o", str(link)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("job_id,num_gpu,") and len(r.stdout.splitlines()) == 481
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


@needs_root
def test_a_device_is_written_through_never_replaced(d: Path) -> None:
    """Twins of /dev/null and /dev/full (the real ones must never be at stake)."""
    null, full = d / "null", d / "full"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    r = simulate(d, "--json", str(null), "--jobs-csv", str(null))  # one device twice is fine
    assert r.exit_code == 0, r.output
    line = error_after_the_replay(simulate(d, "--json", str(full)))
    assert line == f"teiresias: error: --json {full}: cannot write (No space left on device)"
    for dev, minor in ((null, 3), (full, 7)):
        st = os.lstat(dev)
        assert stat.S_ISCHR(st.st_mode) and os.minor(st.st_rdev) == minor, f"{dev} was replaced"
    assert litter(d) == []


def test_a_symlink_is_followed_and_kept(d: Path) -> None:
    (d / "real").mkdir()
    target = d / "real" / "out.json"
    target.write_text("old")
    link = d / "link.json"
    link.symlink_to(target)
    dangling = d / "new.csv"
    dangling.symlink_to(d / "real" / "jobs.csv")
    assert simulate(d, "--json", str(link), "--jobs-csv", str(dangling)).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert dangling.is_symlink() and (d / "real" / "jobs.csv").read_text().startswith("policy,")
    assert target.read_text().lstrip().startswith("[")
    assert litter(d) == [] and litter(d / "real") == []


def test_a_rewritten_file_keeps_its_mode(d: Path) -> None:
    out = d / "private.json"
    out.write_text("old")
    out.chmod(0o600)
    assert simulate(d, "--json", str(out)).exit_code == 0
    assert out.read_text().lstrip().startswith("[") and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_an_output_that_is_an_input_is_refused(d: Path) -> None:
    trace = d / "t.csv"
    (d / "hard.csv").hardlink_to(trace)
    (d / "soft.csv").symlink_to(trace)
    for flag, path in (("--json", trace), ("--jobs-csv", d / "hard.csv"), ("--report", d / "soft.csv")):
        line = one_error_line(simulate(d, flag, str(path)))
        assert f"{flag} {path}: is the input -t {trace}" in line
    line = one_error_line(simulate(d, "--plot", str(d / "c.csv")))
    assert "is the input -c" in line
    assert trace.read_text() == TRACE and (d / "c.csv").read_text() == SPEC


def test_two_outputs_with_one_path_are_refused(d: Path) -> None:
    line = one_error_line(simulate(d, "--json", str(d / "o.json"), "--jobs-csv", f"{d}/./o.json"))
    assert f"--jobs-csv {d}/./o.json: the same file as --json {d / 'o.json'}" in line
    assert not (d / "o.json").exists()


def test_a_dash_is_standard_output_only_where_the_option_says_so(d: Path, monkeypatch) -> None:
    """``--json -`` is standard output; ``--jobs-csv -`` used to make a file named "-"."""
    monkeypatch.chdir(d)
    line = one_error_line(simulate(d, "--jobs-csv", "-"))
    assert line == "teiresias: error: --jobs-csv -: only --json writes to standard output here; " + (
        "give a file name (./- for a file named -)"
    )
    assert not (d / "-").exists()
    r = simulate(d, "--json", "-")
    assert r.exit_code == 0 and '"policy": "gittins"' in r.output  # the default policy


def test_trace_commands_refuse_to_overwrite_their_input(d: Path) -> None:
    samples = d / "s.csv"
    samples.write_text("duration\n" + "".join(f"{100 * k}\n" for k in range(1, 20)))
    line = one_error_line(run("trace", "synth", "-k", "philly", "-G", "8", "-S", str(samples), "-o", str(samples)))
    assert "is the input -S" in line
    sacct = d / "may.txt"
    sacct.write_text("JobIDRaw|Cluster\n")
    assert "is the input" in one_error_line(run("trace", "from-sacct", str(sacct), "-o", str(sacct)))
    line = one_error_line(run("trace", "from-sacct", str(sacct), "-o", str(d / "x.csv"), "-S", str(d / "x.csv")))
    assert "the same file as -o" in line
    assert samples.read_text().startswith("duration\n1") and sacct.read_text() == "JobIDRaw|Cluster\n"


def test_sweep_outputs_are_checked_against_the_spec_and_each_other(d: Path) -> None:
    spec = d / "s.yaml"
    spec.write_text("cluster: c.csv\ntraces: [t.csv]\npolicies: [fifo]\n")
    line = one_error_line(run("simulate", "--sweep", str(spec), "--json", str(d / "t.csv"), "--workdir", str(d / "w")))
    assert "is the input traces:" in line
    line = one_error_line(
        run("simulate", "--sweep", str(spec), "--json", str(d / "o"), "--csv", str(d / "o"), "--workdir", str(d / "w"))
    )
    assert "the same file as --json" in line and not (d / "w").exists()


# -- item 8: found before the replay; a failure while writing is one line ------------------


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mount a real tmpfs with the given options under tmp_path; unmounted after the test."""
    mounted: list[Path] = []

    def mount(name: str, options: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@needs_root
def test_a_read_only_file_system_is_refused_before_the_replay(d: Path, mount_tmpfs) -> None:
    ro = mount_tmpfs("ro", "ro,size=1m")
    for flag in ("--json", "--jobs-csv", "--plot", "--report"):
        name = {"--plot": "o.png", "--report": "o.html"}.get(flag, "o.out")
        line = one_error_line(simulate(d, flag, str(ro / name)))  # one line: no summary table printed
        assert line == f"teiresias: error: {ro / name}: folder {ro} is on a read-only file system; write elsewhere"
    spec = d / "s.yaml"
    spec.write_text("cluster: c.csv\ntraces: [t.csv]\npolicies: [fifo]\n")
    line = one_error_line(run("simulate", "--sweep", str(spec), "--workdir", str(ro / "wd")))
    assert "read-only file system" in line
    assert "read-only file system" in one_error_line(run("trace", "synth", "-o", str(ro / "t.csv")))


@needs_root
def test_an_immutable_folder_is_refused_before_the_replay(d: Path) -> None:
    folder = d / "frozen"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        line = one_error_line(simulate(d, "--json", str(folder / "o.json")))
        assert line == (
            f"teiresias: error: {folder / 'o.json'}: cannot write in folder {folder} "
            "(Operation not permitted); write elsewhere"
        )
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert list(folder.iterdir()) == []


@needs_root
def test_a_full_file_system_while_writing_is_one_line_and_leaves_nothing(d: Path, mount_tmpfs) -> None:
    small = mount_tmpfs("small", "size=16k")
    (small / "o.json").write_text("old")
    # 400 jobs: a per-job CSV of about 30 KiB, more than the file system holds.
    (d / "t.csv").write_text(HEADER + "".join(f"{i},1,{i},1,vgg16,{50 + i},0\n" for i in range(400)))
    line = error_after_the_replay(simulate(d, "--json", str(small / "o.json"), "--jobs-csv", str(small / "jobs.csv")))
    assert line == f"teiresias: error: --jobs-csv {small / 'jobs.csv'}: cannot write (No space left on device); " + (
        "no output was changed"
    )
    assert sorted(p.name for p in small.iterdir()) == ["o.json"] and (small / "o.json").read_text() == "old"


@pytest.mark.parametrize("args", [["trace", "check", "{d}/t.csv"], ["simulate", "-t", "{d}/t.csv", "-c", "{d}/c.csv"]])
def test_standard_output_on_dev_full_is_one_line(d: Path, args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [str(TEIRESIAS), *(a.format(d=d) for a in args)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert (r.returncode, r.stderr) == (2, "teiresias: error: cannot write standard output (No space left on device)\n")


def test_a_closed_pipe_is_still_quiet(d: Path) -> None:
    """``| head -1``: click's broken-pipe handling is kept (no traceback, no error line)."""
    p = subprocess.Popen(
        [str(TEIRESIAS), "simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "-p", "las,fifo,srtf"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err and "error" not in err
