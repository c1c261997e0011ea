"""Human and machine outputs of a replay: tables, per-job CSV, JSON.

The normalised table follows Tiresias Table 5: each policy's average, median
and 95th-percentile JCT divided by that of ``las`` (Tiresias-L), so > 1.00x
means las is better.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import IO

from teiresias.simulator.metrics import SimulationResult, Summary
from teiresias.simulator.trace import TraceJob

JOB_COLUMNS = (
    "policy",
    "job_id",
    "gpus",
    "model",
    "submit",
    "start",
    "end",
    "jct",
    "queue_delay",
    "preemptions",
    "overhead",
    "slowed",
    "nodes",
)


def summary_cells(s: Summary) -> tuple[str, ...]:
    """A policy's row in the summary tables, text and HTML, up to its preemptions:
    policy, jobs, JCT avg / median / p95, queueing delay avg / median / p95 (s),
    makespan (s), preemptions."""
    return (
        s.policy,
        str(s.jobs),
        f"{s.avg_jct:.1f}",
        f"{s.median_jct:.1f}",
        f"{s.p95_jct:.1f}",
        f"{s.avg_queue_delay:.1f}",
        f"{s.median_queue_delay:.1f}",
        f"{s.p95_queue_delay:.1f}",
        f"{s.makespan:.0f}",
        str(s.preemptions),
    )


def _f(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def summary_table(results: Sequence[SimulationResult]) -> str:
    """Absolute figures, one row per policy (seconds)."""
    head: tuple[str, ...] = (
        "policy",
        "jobs",
        "avg JCT",
        "med JCT",
        "p95 JCT",
        "avg queue",
        "med queue",
        "p95 queue",
        "makespan",
        "preempt",
        "overhead",
        "GPU util",
        "wall s",
    )
    rows = [head]
    for r in results:
        s = r.summary
        rows.append(
            (
                *summary_cells(s),
                f"{s.preemption_overhead:.0f}",
                f"{100 * s.gpu_utilization:.1f}%",
                f"{s.wall_seconds:.2f}",
            )
        )
    return _grid(rows)


def gandiva_table(results: Sequence[SimulationResult]) -> str:
    """Gandiva's figures per policy (docs/gandiva.md, "Metrics"): early feedback, useful
    utilisation, load and height, and how often each mechanism ran."""
    rows = [
        (
            "policy",
            "avg feedback",
            "med feedback",
            "p95 feedback",
            "useful util",
            "avg load",
            "max height",
            "suspend",
            "migrate",
            "pack",
            "unpack",
            "resize",
        )
    ]
    for r in results:
        s = r.summary
        rows.append(
            (
                s.policy,
                f"{s.avg_feedback:.1f}",
                f"{s.median_feedback:.1f}",
                f"{s.p95_feedback:.1f}",
                f"{100 * s.useful_utilization:.1f}%",
                f"{s.avg_load:.2f}",
                str(s.max_height),
                str(s.suspensions),
                str(s.migrations),
                str(s.packs),
                str(s.unpacks),
                str(s.resizes),
            )
        )
    return _grid(rows)


def app_source(trace: Sequence[TraceJob]) -> str:
    """Where the apps of a replay come from (teiresias.policy.themis.apps.app_of), for
    the text output and the HTML report alike: one meaning of "app" in both."""
    if any(j.app for j in trace):
        return "apps: the trace's app column (a job without one: its account or user + job-name stem)"
    if any(j.account or j.user for j in trace):
        return "apps: account (or user) + job-name stem, as themis groups jobs (the trace has no app column)"
    return "apps: job-name stems (the trace has no app, account or user column)"


def fairness_table(results: Sequence[SimulationResult]) -> str:
    """Finish-time fairness per policy (Themis §3.2): max rho, Jain's index of rho, share of apps with rho <= 1."""
    rows = [("policy", "apps", "max rho", "Jain rho", "rho<=1")]
    for r in results:
        s = r.summary
        rows.append(
            (s.policy, str(len(s.app_rho)), f"{s.max_rho:.2f}", f"{s.jain_rho:.3f}", f"{100 * s.share_rho_le_1:.0f}%")
        )
    return _grid(rows)


def app_rho_table(results: Sequence[SimulationResult], limit: int = 20) -> str:
    """rho of each app (rows) under each policy (columns), the ``limit`` apps with the highest max first."""
    apps = sorted(
        {a for r in results for a in r.summary.app_rho},
        key=lambda a: (-max(r.summary.app_rho.get(a, 0.0) for r in results), a),
    )
    rows = [("app", *(r.policy for r in results))]
    for a in apps[:limit]:
        rows.append(
            (a or "(none)", *(f"{r.summary.app_rho[a]:.2f}" if a in r.summary.app_rho else "-" for r in results))
        )
    return _grid(rows)


def normalised_table(results: Sequence[SimulationResult], baseline: str = "las") -> str:
    """Table 5 form: JCT of each policy over that of ``baseline`` (first policy if absent)."""
    base = next((r for r in results if r.policy == baseline), results[0])
    b = base.summary

    def ratio(x: float, y: float) -> str:
        return f"{x / y:.2f}x" if y > 0 else "n/a"

    rows = [(f"normalised to {base.policy}", "Average", "Median", "95th")]
    for r in results:
        s = r.summary
        rows.append(
            (s.policy, ratio(s.avg_jct, b.avg_jct), ratio(s.median_jct, b.median_jct), ratio(s.p95_jct, b.p95_jct))
        )
    return _grid(rows)


def _grid(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_jobs_csv(fh: IO[str], results: Sequence[SimulationResult]) -> None:
    """Per-job rows of every policy; ``nodes`` lists the nodes of the last placement, '+'-joined."""
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(JOB_COLUMNS)
    for res in results:
        for j in res.records:
            w.writerow(
                (
                    res.policy,
                    j.job_id,
                    j.gpus,
                    j.model,
                    _f(j.submit),
                    _f(j.start),
                    _f(j.end),
                    _f(j.jct),
                    _f(j.queue_delay),
                    j.preemptions,
                    _f(j.overhead),
                    int(j.slowed),
                    "+".join(j.nodes),
                )
            )


def write_json(fh: IO[str], results: Sequence[SimulationResult], extra: dict | None = None) -> None:
    """A list with one summary object per policy (``--json``), each with ``extra`` keys added."""
    json.dump([{**r.summary.as_json(), **(extra or {})} for r in results], fh, indent=2)
    fh.write("\n")
