"""``teiresias simulate --report out.html`` and the replay's progress bar.

The page is checked twice: its HTML (every section, figures embedded, nothing
fetched from elsewhere, the table's numbers are the run's) and as a reader
sees it, rendered by the real headless Chromium (Debian's ``chromium``,
installed with apt-get as root when missing) into a screenshot that must show
the figures. The progress bar is checked on a real pseudo-terminal.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from teiresias.cli import cli
from teiresias.domain import Cluster
from teiresias.policy.registry import build_policy
from teiresias.simulator import SimulationOptions, TraceJob, run
from teiresias.simulator.html_report import SECTIONS, jain_index
from tests.debian_packages import require_program

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SPEC = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,4,8,64\n"
APPS = ("vision", "speech", "nlp")


def _trace(path: Path, apps: tuple[str, ...]) -> Path:
    """The public 60-job Tiresias trace, with an app per job (round robin over ``apps``) if asked."""
    lines = (FIXTURES / "tiresias-60_job.csv").read_text(encoding="utf-8").splitlines()
    if apps:
        lines = [lines[0] + ",app"] + [f"{ln},{apps[i % len(apps)]}" for i, ln in enumerate(lines[1:])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _simulate(tmp: Path, *extra: str, apps: tuple[str, ...] = APPS):
    (tmp / "spec.csv").write_text(SPEC)
    trace = _trace(tmp / "t.csv", apps)
    return CliRunner().invoke(
        cli,
        ["simulate", "-t", str(trace), "-c", str(tmp / "spec.csv"), "-p", "las,fifo", "-q", "600", "-o", "30", *extra],
    )


def _sections(page: str) -> dict[str, str]:
    return dict(re.findall(r'<section id="([a-z]+)">(.*?)</section>', page, flags=re.S))


def test_report_has_every_section_self_contained_with_the_runs_numbers(tmp_path: Path) -> None:
    r = _simulate(tmp_path, "--report", str(tmp_path / "out.html"), "--json", str(tmp_path / "s.json"))
    assert r.exit_code == 0, r.output
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    sections = _sections(page)
    assert list(sections) == list(SECTIONS)
    # Self-contained: nothing is fetched when the page is opened.
    assert not re.search(r"<script|<link|<iframe|src=\"(?!data:)|url\(", page)
    images = re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)
    # JCT, queueing, utilisation, preemptions (las preempts here), fairness.
    assert len(images) == 5
    for data in images:
        svg = base64.b64decode(data).decode("utf-8")
        assert "<svg" in svg and "</svg>" in svg and "<path" in svg
    for sid in ("jct", "queueing", "utilization", "fairness"):
        assert "data:image/svg+xml" in sections[sid], sid
    summary = {s["policy"]: s for s in json.loads((tmp_path / "s.json").read_text())}
    for policy, s in summary.items():
        row = re.search(rf"<tr><td>{policy}</td><td>60</td><td[^>]*>([0-9.]+)</td>", sections["policies"])
        assert row and float(row.group(1)) == pytest.approx(s["avg_jct"], abs=0.05), policy
    assert "normalised to <b>las</b>" in sections["policies"]
    assert summary["las"]["preemptions"] > 0 and "jobs preempted" in sections["preemptions"]
    for app in APPS:
        assert f"<td>{app}</td>" in sections["fairness"]
    assert "Jain" in sections["fairness"]


def test_fairness_section_says_so_when_every_job_is_in_one_app(tmp_path: Path) -> None:
    r = _simulate(tmp_path, "--report", str(tmp_path / "out.html"), apps=("search",))
    assert r.exit_code == 0, r.output
    fairness = _sections((tmp_path / "out.html").read_text(encoding="utf-8"))["fairness"]
    assert "All jobs are in one app" in fairness and "<img" not in fairness


def test_report_needs_an_html_name_and_writes_nothing_on_bad_input(tmp_path: Path) -> None:
    r = _simulate(tmp_path, "--report", str(tmp_path / "out.png"))
    assert r.exit_code == 2 and "end the name with .html" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "out.png").exists()
    r = _simulate(tmp_path, "--report", str(tmp_path / "missing" / "out.html"))
    assert r.exit_code == 2 and not (tmp_path / "missing").exists()


def test_jain_index() -> None:
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = require_program("chromium", "chromium")
    r = _simulate(tmp_path, "--report", str(tmp_path / "out.html"))
    assert r.exit_code == 0, r.output
    shot = tmp_path / "shot.png"
    res = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1100,3800",
            f"--screenshot={shot}",
            (tmp_path / "out.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    if os.environ.get("TEIRESIAS_TEST_KEEP_SCREENSHOT"):
        Path(os.environ["TEIRESIAS_TEST_KEEP_SCREENSHOT"]).write_bytes(shot.read_bytes())
    import matplotlib.image

    img = matplotlib.image.imread(shot)[:, :, :3]
    assert img.shape[:2] == (3800, 1100)
    # Not blank: a good share of the page is ink, not background.
    ink = np.any(img < 0.9, axis=2).mean()
    assert ink > 0.03, f"only {ink:.1%} of the page is drawn"
    # The figures rendered (a broken <img> draws no curves): matplotlib's first
    # two line colours, las and fifo, cover real area of the page.
    for name, rgb in (("las C0 blue", (0x1F, 0x77, 0xB4)), ("fifo C1 orange", (0xFF, 0x7F, 0x0E))):
        near = np.all(np.abs(img * 255 - np.array(rgb)) < 24, axis=2).sum()
        assert near > 2000, f"{name}: {near} pixels"


# ------------------------------------------------------------ progress bar
def _on_a_terminal(fn) -> str:
    """Run ``fn`` with stderr on a real pseudo-terminal; what it wrote there."""
    master, slave = pty.openpty()
    # A fresh pty is 0 columns wide, where tqdm draws nothing; a terminal has a size.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    saved = sys.stderr
    sys.stderr = os.fdopen(os.dup(slave), "w")
    try:
        fn()
        sys.stderr.flush()
    finally:
        sys.stderr.close()
        sys.stderr = saved
        os.close(slave)
    out = b""
    os.set_blocking(master, False)
    try:
        while chunk := os.read(master, 65536):
            out += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(master)
    return out.decode(errors="replace")


def _replay(opts: SimulationOptions) -> None:
    jobs = [TraceJob(i, 1, float(i), 5.0) for i in range(5)]
    run(jobs, Cluster.from_tiresias_spec(1, 1, 2), build_policy("fifo"), opts)


def test_progress_bar_on_a_terminal_only_once_the_replay_runs_long() -> None:
    # On a terminal: no bar for a replay shorter than the delay (here all of them).
    assert "simulate fifo" not in _on_a_terminal(lambda: _replay(SimulationOptions()))
    # A replay that runs past the delay gets one (delay 0: every replay is "long").
    shown = _on_a_terminal(lambda: _replay(SimulationOptions(progress_delay=0.0)))
    assert "simulate fifo" in shown and "5/5" in shown


def test_progress_bar_off_when_stderr_is_not_a_terminal(capsys) -> None:
    _replay(SimulationOptions(progress_delay=0.0))
    assert capsys.readouterr().err == ""


def test_the_report_and_the_text_output_name_the_same_apps(tmp_path: Path) -> None:
    """Issue 23 item 9: one meaning of "app" in one command. The text output's rho
    tables and the report's fairness section both group by teiresias.policy.themis.apps.app_of
    (the app column here, not the account column beside it), and a trace with no owner
    names apps by job-name stem, never "/stem"."""
    (tmp_path / "spec.csv").write_text(SPEC)
    lines = (FIXTURES / "tiresias-60_job.csv").read_text(encoding="utf-8").splitlines()
    mixed = [lines[0] + ",account,app"] + [f"{ln},acct{i % 2},{APPS[i % 3]}" for i, ln in enumerate(lines[1:])]
    (tmp_path / "mixed.csv").write_text("\n".join(mixed) + "\n", encoding="utf-8")
    (tmp_path / "plain.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for trace, apps in (("mixed.csv", set(APPS)), ("plain.csv", None)):
        r = CliRunner().invoke(
            cli,
            ["simulate", "-t", str(tmp_path / trace), "-c", str(tmp_path / "spec.csv"), "-p", "las"]
            + ["--report", str(tmp_path / "r.html")],
        )
        assert r.exit_code == 0, r.output
        table = r.output.split("\napp ", 1)[1].splitlines()[2:]
        text_apps = {row.split()[0] for row in table if row.strip()}
        fairness = _sections((tmp_path / "r.html").read_text(encoding="utf-8"))["fairness"]
        html_apps = set(re.findall(r"<tr><td>las</td><td>([^<]+)</td><td>\d+</td>", fairness))  # app, jobs
        assert text_apps == html_apps, (trace, text_apps, html_apps)
        if apps is not None:
            assert text_apps == apps and "apps: the trace's app column" in r.output
        else:
            assert len(text_apps) > 1 and not any(a.startswith("/") for a in text_apps), text_apps
            assert "apps: job-name stems (the trace has no app, account or user column)" in r.output
