"""``teiresias simulate --report out.html``: one self-contained page.

Sections (each an ``<section id=...>``, the test looks for them): ``policies``
(the summary and, with several policies, the Table 5 ratios), ``jct`` and
``queueing`` (CDFs, log x), ``utilization`` (allocated GPUs over time),
``preemptions`` (jobs by number of preemptions) and ``fairness`` (per app:
the apps of the text output's rho tables, ``report.app_source``).

Figures are matplotlib SVGs embedded as ``data:`` URIs: the file can be mailed
or attached to a ticket and still shows everything, with no script, font or
image fetched from anywhere. An ``<img>`` per figure, rather than inline
``<svg>``, keeps the ids matplotlib gives clip paths from clashing between
figures.
"""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import IO

import numpy as np

from teiresias.simulator.metrics import SimulationResult
from teiresias.simulator.plots import _smoothed_utilisation
from teiresias.simulator.report import _f, app_source, summary_cells
from teiresias.simulator.trace import TraceJob

SECTIONS = ("policies", "jct", "queueing", "utilization", "preemptions", "fairness")
# Queueing delays of 0 s cannot sit on a log axis; they are drawn at this value.
_LOG_FLOOR = 1.0


@dataclass(frozen=True)
class RunInfo:
    """What the page says about the replay besides the results."""

    trace_name: str
    jobs: int
    nodes: int
    gpus: int
    interval: float
    preempt_overhead: float
    placement: str
    version: str = ""


@dataclass(frozen=True)
class AppRow:
    """One app's figures under one policy. Slowdown = JCT / run time alone."""

    app: str
    jobs: int
    gpu_seconds: float
    avg_jct: float
    avg_queue_delay: float
    mean_slowdown: float


def per_app(result: SimulationResult, trace: Sequence[TraceJob]) -> list[AppRow]:
    """Each app's figures; apps are the records' (teiresias.policy.themis.apps.app_of,
    the same the text output's rho tables use)."""
    by_id = {j.job_id: j for j in trace}
    groups: dict[str, list] = defaultdict(list)
    for rec in result.records:
        groups[rec.app or "(none)"].append((rec, by_id[rec.job_id]))
    rows = []
    for app in sorted(groups):
        pairs = groups[app]
        rows.append(
            AppRow(
                app=app,
                jobs=len(pairs),
                gpu_seconds=float(sum(j.num_gpus * j.duration for _, j in pairs)),
                avg_jct=float(np.mean([r.jct for r, _ in pairs])),
                avg_queue_delay=float(np.mean([r.queue_delay for r, _ in pairs])),
                mean_slowdown=float(np.mean([r.jct / j.duration if j.duration > 0 else 1.0 for r, j in pairs])),
            )
        )
    return rows


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all apps fare
    alike, 1/n when one app takes all the slowdown."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def preemption_counts(result: SimulationResult) -> dict[int, int]:
    """Number of jobs by how often each was preempted."""
    counts: dict[int, int] = defaultdict(int)
    for rec in result.records:
        counts[rec.preemptions] += 1
    return dict(sorted(counts.items()))


# ----------------------------------------------------------------- figures
def _svg_img(fig, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    # No date in the SVG: the same replay gives the same page.
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def _figure(width: float = 8.0, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _cdf_figure(results: Sequence[SimulationResult], attr: str, xlabel: str, floor: float | None) -> str:
    fig, ax = _figure()
    for res in results:
        v = np.sort(np.asarray([getattr(r, attr) for r in res.records], dtype=float))
        if len(v):
            if floor is not None:
                v = np.maximum(v, floor)
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=res.policy, linewidth=1.5)
    ax.set_xscale("log")
    # Labels on decades only: minor labels (2x10^2, 3x10^2, ...) run into each other.
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return _svg_img(fig, f"CDF of {xlabel}")


def _utilization_figure(results: Sequence[SimulationResult]) -> str:
    fig, ax = _figure()
    for res in results:
        t, u = _smoothed_utilisation(res)
        if len(t):
            ax.plot((np.asarray(t) - t[0]) / 3600.0, 100 * np.asarray(u), label=res.policy, linewidth=1)
    ax.set_xlabel("time since first submission (hours)")
    ax.set_ylabel("allocated GPUs (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return _svg_img(fig, "GPU utilisation over time")


def _grouped_bars(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str, alt: str
) -> str:
    fig, ax = _figure(8.0, 3.2)
    n = max(len(series), 1)
    width = 0.8 / n
    x = np.arange(len(labels))
    for k, (name, values) in enumerate(series.items()):
        ax.bar(x + (k - (n - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(x, labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _svg_img(fig, alt)


# -------------------------------------------------------------------- page
_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2430;
       max-width: 1000px; margin: 24px auto; padding: 0 20px; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 19px; margin-top: 32px; border-bottom: 2px solid #d8dee9; padding-bottom: 4px; }
p.meta { color: #4c566a; margin-top: 0; }
table { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e5e9f0; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eceff4; }
td.best { font-weight: 700; color: #1b6e3a; }
img { max-width: 100%; }
p.note { color: #4c566a; font-size: 13px; }
"""


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], best: Set[tuple[int, int]] = frozenset()) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for i, row in enumerate(rows):
        cells = "".join(
            f'<td class="best">{html.escape(c)}</td>' if (i, k) in best else f"<td>{html.escape(c)}</td>"
            for k, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _policy_section(results: Sequence[SimulationResult]) -> str:
    head = (
        "policy",
        "jobs",
        "avg JCT (s)",
        "median JCT",
        "p95 JCT",
        "avg queue (s)",
        "median queue",
        "p95 queue",
        "makespan (s)",
        "preemptions",
        "GPU util",
    )
    rows = []
    for r in results:
        s = r.summary
        rows.append((*summary_cells(s), f"{100 * s.gpu_utilization:.1f}%"))
    best: set[tuple[int, int]] = set()
    if len(results) > 1:
        # Lowest of each time column in bold: the reader's first question.
        for col, key in (
            (2, "avg_jct"),
            (3, "median_jct"),
            (4, "p95_jct"),
            (5, "avg_queue_delay"),
            (6, "median_queue_delay"),
            (7, "p95_queue_delay"),
            (8, "makespan"),
        ):
            low = min(getattr(r.summary, key) for r in results)
            best |= {(i, col) for i, r in enumerate(results) if getattr(r.summary, key) == low}
    parts = [_table(head, rows, best)]
    if len(results) > 1:
        base = next((r for r in results if r.policy == "las"), results[0])
        b = base.summary

        def ratio(x: float, y: float) -> str:
            return f"{x / y:.2f}x" if y > 0 else "n/a"

        parts.append(
            f"<p>JCT normalised to <b>{html.escape(base.policy)}</b> (Tiresias Table 5: "
            f"above 1.00x means {html.escape(base.policy)} is better):</p>"
        )
        parts.append(
            _table(
                ("policy", "average", "median", "95th"),
                [
                    (
                        r.policy,
                        ratio(r.summary.avg_jct, b.avg_jct),
                        ratio(r.summary.median_jct, b.median_jct),
                        ratio(r.summary.p95_jct, b.p95_jct),
                    )
                    for r in results
                ],
            )
        )
    return "\n".join(parts)


def _preemption_section(results: Sequence[SimulationResult]) -> str:
    counts = [preemption_counts(r) for r in results]
    ks = sorted({k for c in counts for k in c})
    if ks == [0] or not ks:
        return "<p>No job was preempted under any policy.</p>"
    labels = [str(k) for k in ks]
    series = {r.policy: [c.get(k, 0) for k in ks] for r, c in zip(results, counts)}
    fig = _grouped_bars(labels, series, "preemptions of a job", "jobs", "jobs by number of preemptions")
    rows = []
    for r in results:
        p = [rec.preemptions for rec in r.records]
        rows.append(
            (
                r.policy,
                str(sum(1 for x in p if x)),
                str(sum(p)),
                str(max(p) if p else 0),
                f"{r.summary.preemption_overhead:.0f}",
            )
        )
    return (
        fig
        + "\n"
        + _table(("policy", "jobs preempted", "preemptions", "most for one job", "overhead charged (s)"), rows)
    )


def _fairness_section(results: Sequence[SimulationResult], trace: Sequence[TraceJob]) -> str:
    source = html.escape(app_source(trace))
    per = {r.policy: per_app(r, trace) for r in results}
    apps = [row.app for row in next(iter(per.values()))]
    if len(apps) < 2:
        return f"<p>All jobs are in one app ({source}), so there is nothing to compare between apps.</p>"
    fig = _grouped_bars(
        apps,
        {p: [row.mean_slowdown for row in rows] for p, rows in per.items()},
        "app",
        "mean slowdown (JCT / run time alone)",
        "mean slowdown per app",
    )
    jain = _table(
        ("policy", "Jain's index of per-app mean slowdown"),
        [(p, f"{jain_index([row.mean_slowdown for row in rows]):.3f}") for p, rows in per.items()],
    )
    detail = _table(
        ("policy", "app", "jobs", "GPU-hours asked", "avg JCT (s)", "avg queue (s)", "mean slowdown"),
        [
            (
                p,
                row.app,
                str(row.jobs),
                f"{row.gpu_seconds / 3600:.1f}",
                f"{row.avg_jct:.1f}",
                f"{row.avg_queue_delay:.1f}",
                f"{row.mean_slowdown:.2f}",
            )
            for p, rows in per.items()
            for row in rows
        ],
    )
    return (
        f"<p>{source[0].upper() + source[1:]}; the same apps as the text output's rho tables. Slowdown is a "
        "job's JCT over its run time alone; Jain's index is 1.000 when every app is slowed alike.</p>\n"
        + fig
        + "\n"
        + jain
        + "\n"
        + detail
    )


def write_html(fh: IO[str], results: Sequence[SimulationResult], trace: Sequence[TraceJob], info: RunInfo) -> None:
    """The whole page; ``results`` need their timelines (``record_timeline``)."""
    title = f"teiresias simulate: {info.trace_name}"
    meta = (
        f"{info.jobs} jobs on {info.nodes} nodes / {info.gpus} GPUs; scheduling interval "
        f"{info.interval:g} s; preemption overhead {info.preempt_overhead:g} s; placement {info.placement}"
        + (f"; teiresias {info.version}" if info.version else "")
    )
    body = {
        "policies": ("Policies", _policy_section(results)),
        "jct": ("Job completion time (CDF)", _cdf_figure(results, "jct", "JCT (seconds, log scale)", None)),
        "queueing": (
            "Queueing delay (CDF)",
            _cdf_figure(results, "queue_delay", "queueing delay (seconds, log scale)", _LOG_FLOOR)
            + f'<p class="note">Time a job held no GPUs: the first wait plus every wait after a '
            f"preemption. Delays under {_f(_LOG_FLOOR)} s are drawn at {_f(_LOG_FLOOR)} s.</p>",
        ),
        "utilization": ("GPU utilisation over time", _utilization_figure(results)),
        "preemptions": ("Preemptions per job", _preemption_section(results)),
        "fairness": ("Per-app fairness", _fairness_section(results, trace)),
    }
    fh.write(
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f'<h1>{html.escape(title)}</h1>\n<p class="meta">{html.escape(meta)}</p>\n'
    )
    for sid in SECTIONS:
        heading, content = body[sid]
        fh.write(f'<section id="{sid}">\n<h2>{html.escape(heading)}</h2>\n{content}\n</section>\n')
    fh.write("</body>\n</html>\n")
