"""``teiresias simulate``: replay a Tiresias trace under one or more policies."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from teiresias.errors import ConfigError

_PLACEMENTS = ("consolidate", "spread", "profile")


def _parse_queues(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        qs = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"--queues {text!r}: give GPU-second thresholds separated by commas, e.g. 3600,36000"
        ) from None
    if not qs:
        raise ConfigError("--queues is empty; give GPU-second thresholds, e.g. 3600")
    return qs


def _policy_names(text: str) -> list[str]:
    from teiresias.policy.registry import POLICY_NAMES

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"--policy is empty; choose from: {', '.join(POLICY_NAMES)}")
    for n in names:
        if n not in POLICY_NAMES:
            raise ConfigError(f"unknown policy {n!r}; choose from: {', '.join(POLICY_NAMES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--policy {text!r} names a policy twice")
    return names


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-t",
    "--trace",
    "trace_path",
    default=None,
    metavar="TRACE.csv",
    help="Tiresias trace: job_id,num_gpu,submit_time,iterations,model_name,duration,interval.",
)
@click.option(
    "-c",
    "--cluster",
    "cluster_path",
    default=None,
    metavar="SPEC.csv|SPEC.yaml",
    help="Tiresias cluster_spec.csv or a YAML cluster (etc/cluster.yaml).",
)
@click.option(
    "-p",
    "--policy",
    "policies",
    default="gittins",
    show_default=True,
    metavar="NAME[,NAME...]",
    help="Policies to compare: fifo, best-effort, sjf, srtf, srsf, las, gittins, themis. The default, "
    "gittins, ranks the last queue by the index and keeps running jobs' places (docs/policies.md, "
    "'Defaults'); las is the paper's 2D-LAS.",
)
@click.option(
    "-q",
    "--queues",
    default=None,
    metavar="S[,S...]",
    help="MLFQ thresholds in GPU-seconds (las/gittins), or auto: fitted to --gittins-samples. [default: 3600]",
)
@click.option(
    "-k",
    "--promote-knob",
    type=float,
    default=None,
    metavar="X",
    help="PROMOTEKNOB: promote a job when waiting >= X * executed. [default: off]",
)
@click.option(
    "-g",
    "--gittins-samples",
    default=None,
    metavar="FILE",
    help="Job GPU-time samples (CSV column 'duration') for gittins. [default: the public Philly "
    "samples shipped with teiresias, teiresias/data/yarn-gput10000.csv]",
)
@click.option(
    "-L",
    "--last-queue",
    type=click.Choice(("fifo", "gittins")),
    default=None,
    help="Order of gittins' last queue: fifo by first start (the paper) or the Gittins index "
    "with Delta = infinity, re-ranked when a job's GPU-time crosses a quantile point. [default: gittins]",
)
@click.option(
    "--queue-order",
    type=click.Choice(("fifo", "running-first", "lifo-resume")),
    default=None,
    help="las/gittins, inside a queue: fifo by first start (the paper), running-first (running jobs "
    "keep their place), lifo-resume (running-first, and the job preempted last resumes first). "
    "[default: las fifo, gittins lifo-resume]",
)
@click.option(
    "--ignore-time-limits",
    is_flag=True,
    help="gittins: rank as if no job declared a time limit (the trace's time_limit column).",
)
@click.option(
    "--preempt-cost",
    type=float,
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="gittins: a preemption's checkpoint + restore cost; jobs ranked by the index swap only "
    "when the gain in expected GPU-time outweighs what the swap costs both (0 = off).",
)
@click.option("-P", "--placement", type=click.Choice(_PLACEMENTS), default="consolidate", show_default=True)
@click.option(
    "--packlimit",
    type=float,
    default=None,
    metavar="SKEW",
    help="PACKLIMIT for --placement profile: consolidate iff skew > SKEW. [default: 0.5]",
)
@click.option(
    "-C",
    "--cells",
    "cells_path",
    default=None,
    metavar="CELLS.yaml",
    help="HiveD virtual clusters (etc/cells.example.yaml): each policy orders jobs inside "
    "each VC; jobs map to VCs by the trace's account column.",
)
@click.option("--continuous", is_flag=True, help="las/gittins with continuous priorities (Tiresias Fig. 7).")
@click.option(
    "-o",
    "--preempt-overhead",
    type=float,
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds charged to a preempted job when it resumes.",
)
@click.option(
    "-i",
    "--interval",
    type=float,
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Scheduling interval (rounds also run on arrivals and completions); 0 = events only.",
)
@click.option(
    "--slowdown",
    "slowdown_path",
    default=None,
    metavar="FILE|none",
    help="Per-model skew/slowdown table (etc/slowdown.yaml format). [default: built-in Table 6]",
)
@click.option(
    "--sharing-slowdown",
    "sharing_path",
    default=None,
    metavar="FILE",
    help="sjf-bsbf/sjf-ffs: GPU-sharing interference ratios and memory footprints (etc/sharing.yaml; "
    "docs/sjf-bsbf.md). [default: xi = 1.5 for every job, memory never binding]",
)
@click.option(
    "-s",
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Recorded in the JSON; seeds themis' random order of leftover GPUs (the engine draws none).",
)
@click.option(
    "-j",
    "--json",
    "json_out",
    default=None,
    metavar="OUT.json",
    help="Write one summary object per policy ('-' = stdout, tables then go to stderr).",
)
@click.option("--jobs-csv", default=None, metavar="OUT.csv", help="Per-job results of every policy.")
@click.option(
    "--plot",
    default=None,
    metavar="OUT.png",
    help="JCT CDF (log x) and GPU utilisation over time; the suffix picks the format (.png, .pdf, .svg, ...).",
)
@click.option(
    "-r",
    "--report",
    default=None,
    metavar="OUT.html",
    help="One self-contained HTML page: policy table, JCT and queueing-delay CDFs, utilisation "
    "over time, preemptions per job, per-app fairness (apps as in the rho tables: the trace's app "
    "column, else account or user + job-name stem).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr. [default: on a terminal, once a replay runs over 2 s]",
)
@click.option(
    "--lease",
    type=float,
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="themis: GPU lease; at its end the GPUs are auctioned again (docs/themis.md).",
)
@click.option(
    "-f",
    "--fairness-knob",
    type=float,
    default=0.8,
    show_default=True,
    metavar="F",
    help="themis: f in (0,1); the 1-f fraction of apps farthest from fair bid in each auction.",
)
@click.option(
    "--sweep",
    "sweep_path",
    default=None,
    metavar="SPEC.yaml",
    help="Run every combination of the spec's traces, policies and knobs (docs/simulator.md, "
    "'Sweeps') in parallel, merged into one table (--json, --csv, --plot); replaces -t/-c.",
)
@click.option(
    "--on-slurm",
    is_flag=True,
    help="With --sweep: run the replays as one Slurm job array (sbatch --wait) instead of local processes.",
)
@click.option(
    "--partition",
    default=None,
    metavar="NAME",
    help="With --on-slurm: the partition of the array tasks (one the controller does not manage).",
)
@click.option(
    "--workers", type=int, default=None, metavar="N", help="With --sweep: local worker processes. [default: the CPUs]"
)
@click.option(
    "--workdir",
    default=None,
    metavar="DIR",
    help="With --sweep: where runs, synthesized traces, results and logs go (with --on-slurm on a "
    "file system the nodes see). [default: a new folder under the current one]",
)
@click.option("--csv", "csv_out", default=None, metavar="OUT.csv", help="With --sweep: the merged table as CSV.")
@click.option(
    "--feedback",
    type=float,
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="Time to early feedback, every policy: until a job has done this much work (docs/gandiva.md).",
)
@click.option(
    "--slice",
    "slice_len",
    type=float,
    default=None,
    metavar="SECONDS",
    help="gandiva: time-slice length (Gandiva §3.1). [default: 60]",
)
@click.option(
    "--max-height",
    type=int,
    default=None,
    metavar="N",
    help="gandiva: at most N jobs time-share a set of GPUs; more wait. [default: 4]",
)
@click.option(
    "--pack/--no-pack",
    "packing",
    default=None,
    help="gandiva: pack light time-sliced jobs, unpack when slicing would be faster. [default: --pack]",
)
@click.option(
    "--migration/--no-migration",
    default=None,
    help="gandiva: migrate to lower the height, consolidate and defragment. [default: --migration]",
)
@click.option(
    "--migration-cost",
    type=float,
    default=None,
    metavar="SECONDS",
    help="gandiva: seconds a migration or a resize costs the job. [default: 6.9, measured on "
    "the local cluster, docs/gandiva.md]",
)
@click.option(
    "--defrag-threshold",
    type=int,
    default=None,
    metavar="GPUS",
    help="gandiva: defragment while a busy node has this many free GPUs. [default: 3]",
)
@click.option(
    "--grow-shrink/--no-grow-shrink",
    default=None,
    help="gandiva: grow elastic jobs (trace column elastic) onto idle GPUs, shrink them for waiting "
    "jobs. [default: --grow-shrink]",
)
@click.option(
    "--idle-period",
    type=float,
    default=None,
    metavar="SECONDS",
    help="gandiva: GPUs idle this long before a job grows onto them. [default: 300]",
)
def simulate(
    trace_path: str,
    cluster_path: str,
    policies: str,
    queues: str | None,
    promote_knob: float | None,
    gittins_samples: str | None,
    last_queue: str | None,
    preempt_cost: float,
    placement: str,
    packlimit: float | None,
    cells_path: str | None,
    continuous: bool,
    preempt_overhead: float,
    interval: float,
    slowdown_path: str | None,
    seed: int,
    json_out: str | None,
    jobs_csv: str | None,
    plot: str | None,
    report: str | None,
    progress: bool | None,
    lease: float = 600.0,
    fairness_knob: float = 0.8,
    queue_order: str | None = None,
    ignore_time_limits: bool = False,
    sweep_path: str | None = None,
    on_slurm: bool = False,
    partition: str | None = None,
    workers: int | None = None,
    workdir: str | None = None,
    csv_out: str | None = None,
    sharing_path: str | None = None,
    feedback: float = 600.0,
    slice_len: float | None = None,
    max_height: int | None = None,
    packing: bool | None = None,
    migration: bool | None = None,
    migration_cost: float | None = None,
    defrag_threshold: int | None = None,
    grow_shrink: bool | None = None,
    idle_period: float | None = None,
) -> None:
    """Replay a trace under the same policy objects the controller runs.

    Prints per-policy JCT / queueing delay / makespan / preemptions / GPU
    utilisation and, with several policies, JCTs normalised to las (Tiresias
    Table 5). Output files are written only if the whole run succeeds.
    Exit 0 on success, 2 on bad input.

    \b
    Example:
      teiresias simulate -t trace.csv -c etc/cluster.yaml -p las,best-effort,fifo \\
          --queues 3600 --preempt-overhead 30 --json out.json --plot out.png --report out.html
      teiresias simulate -t tenants.csv -c etc/cluster.yaml -p las --cells etc/cells.example.yaml
      teiresias simulate --sweep sweep.yaml --on-slurm --partition other --json all.json --plot all.png
    """
    if sweep_path is not None:
        _refuse_single_run_options(click.get_current_context())
        _sweep(sweep_path, on_slurm, partition, workers, workdir, json_out, csv_out, plot)
        return
    for flag, given in (
        ("--on-slurm", on_slurm),
        ("--partition", partition),
        ("--workers", workers),
        ("--workdir", workdir),
        ("--csv", csv_out),
    ):
        if given:
            raise ConfigError(f"{flag} goes with --sweep SPEC.yaml; give a sweep spec or drop {flag}")
    if trace_path is None or cluster_path is None:
        raise ConfigError(
            f"missing {'-t/--trace TRACE.csv' if trace_path is None else '-c/--cluster SPEC'}; "
            "give a trace and a cluster, or --sweep SPEC.yaml"
        )
    from teiresias.clusterspec import load_cluster
    from teiresias.outputs import StagedOutputs, check_outputs
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator import SimulationOptions, Simulator, load_slowdown, read_trace
    from teiresias.simulator.report import (
        app_rho_table,
        app_source,
        fairness_table,
        gandiva_table,
        normalised_table,
        summary_table,
        write_jobs_csv,
        write_json,
    )
    from teiresias.simulator.slowdown import SlowdownTable

    # Validate every input before simulating anything.
    names = _policy_names(policies)
    if interval < 0:
        raise ConfigError(f"--interval {interval} must be >= 0 seconds (0 = schedule on events only)")
    if preempt_overhead < 0:
        raise ConfigError(f"--preempt-overhead {preempt_overhead} must be >= 0 seconds")
    outputs = {
        o.flag: o
        for o in check_outputs(
            (("--json", json_out), ("--jobs-csv", jobs_csv), ("--plot", plot), ("--report", report)),
            (
                ("-t", trace_path),
                ("-c", cluster_path),
                ("-g", gittins_samples),
                ("--slowdown", None if (slowdown_path or "").lower() == "none" else slowdown_path),
                ("--sharing-slowdown", sharing_path),
                ("-C", cells_path),
            ),
            stdout=("--json",),
        )
    }
    if report is not None and not report.lower().endswith((".html", ".htm")):
        raise ConfigError(f"--report {report}: the report is an HTML page; end the name with .html")
    plot_fmt = "png"
    if plot is not None:
        from teiresias.simulator.plots import plot_format

        plot_fmt = plot_format(plot)
    cluster = load_cluster(cluster_path)
    trace = read_trace(trace_path, cluster)
    if slowdown_path is None:
        slowdown = SlowdownTable()
    elif slowdown_path.lower() == "none":
        slowdown = SlowdownTable.none()
    else:
        slowdown = load_slowdown(slowdown_path)
    distribution = None
    if gittins_samples is not None or "gittins" in names:
        from teiresias.data import PHILLY_SAMPLES
        from teiresias.policy.gittins import ServiceDistribution

        distribution = ServiceDistribution.from_samples_file(gittins_samples or PHILLY_SAMPLES)
    if last_queue is not None and last_queue != "fifo" and "gittins" not in names:
        raise ConfigError(
            f"--last-queue {last_queue} orders gittins' last queue; add gittins to --policy "
            "(las has no GPU-time distribution)"
        )
    if queue_order is not None and not {"las", "gittins"} & set(names):
        raise ConfigError(f"--queue-order {queue_order} orders las/gittins queues; add las or gittins to --policy")
    if preempt_cost < 0:
        raise ConfigError(f"--preempt-cost {preempt_cost} must be >= 0 seconds")
    if preempt_cost > 0 and "gittins" not in names:
        raise ConfigError(
            "--preempt-cost weighs swaps between jobs ranked by the Gittins index; add gittins to --policy"
        )
    kw: dict = {
        "placement": placement,
        "continuous": continuous,
        "promote_knob": promote_knob,
        "distribution": distribution,
        "last_queue": last_queue,
        "queue_order": queue_order,
        "time_limits": not ignore_time_limits,
        "preempt_cost": preempt_cost,
        "lease": lease,
        "fairness_knob": fairness_knob,
        "seed": seed,
    }
    if queues is not None and queues.strip() == "auto":
        if distribution is None:
            raise ConfigError("--queues auto fits the thresholds to job GPU-time samples; give --gittins-samples FILE")
        from teiresias.policy.thresholds import fit_thresholds

        fit = fit_thresholds(distribution)
        q: tuple[float, ...] | None = fit.thresholds
        click.echo(
            f"--queues auto: {','.join(f'{x:.0f}' for x in fit.thresholds)} GPU-s, fitted to "
            f"{fit.samples} GPU-time samples (docs/policies.md)",
            err=True,
        )
    else:
        q = _parse_queues(queues)
    if q is not None:
        kw["queues"] = q
    if packlimit is not None:
        kw["packlimit"] = packlimit
    if sharing_path is not None:
        from teiresias.policy.registry import SHARING_NAMES
        from teiresias.simulator.sharing import load_sharing_model

        if not set(names) & set(SHARING_NAMES):
            raise ConfigError(
                f"--sharing-slowdown is read by the sharing policies; add one of {', '.join(SHARING_NAMES)} to --policy"
            )
        kw["sharing"] = load_sharing_model(sharing_path)
    if not feedback >= 0:
        raise ConfigError(f"--feedback {feedback} must be >= 0 seconds of work")
    if migration_cost is not None and not migration_cost >= 0:
        raise ConfigError(f"--migration-cost {migration_cost} must be >= 0 seconds")
    knobs = {
        "slice": slice_len,
        "max_height": max_height,
        "packing": packing,
        "migration": migration,
        "defrag_threshold": defrag_threshold,
        "grow_shrink": grow_shrink,
        "idle_period": idle_period,
    }
    chosen: dict[str, Any] = {k: v for k, v in knobs.items() if v is not None}
    if (chosen or migration_cost is not None) and "gandiva" not in names:
        raise ConfigError(
            "--slice, --max-height, --pack, --migration, --migration-cost, --defrag-threshold, "
            "--grow-shrink and --idle-period are gandiva's knobs; add gandiva to --policy"
        )
    if chosen:
        from teiresias.policy.gandiva import GandivaParams

        kw["gandiva"] = GandivaParams(**chosen)
    params = PolicyParams(**kw)
    built = [build_policy(n, params) for n in names]
    if cells_path is not None:
        from teiresias.cells.scheduler import CellsPolicy

        # Validated against the simulated cluster: unknown nodes or GPU counts fail here.
        built = [CellsPolicy.from_file(cells_path, pol, cluster) for pol in built]
    options = SimulationOptions(
        interval=interval,
        preempt_overhead=preempt_overhead,
        slowdown=slowdown,
        progress=progress,
        feedback=feedback,
        migration_cost=migration_cost,
        record_timeline=plot is not None or report is not None,
    )

    results = [Simulator(trace, cluster, pol, options).run() for pol in built]

    to_stdout_json = json_out == "-"
    out = sys.stderr if to_stdout_json else sys.stdout
    click.echo(
        f"{Path(trace_path).name}: {len(trace)} jobs on {len(cluster.nodes)} nodes / "
        f"{cluster.total_gpus} GPUs, interval {interval:g} s, preemption overhead {preempt_overhead:g} s",
        file=out,
    )
    click.echo(summary_table(results), file=out)
    if "gandiva" in names:
        click.echo("", file=out)
        click.echo(gandiva_table(results), file=out)
    if any(r.summary.app_rho for r in results):
        click.echo("", file=out)
        click.echo(app_source(trace), file=out)
        click.echo(fairness_table(results), file=out)
        click.echo("", file=out)
        click.echo(app_rho_table(results), file=out)
    if len(results) > 1:
        click.echo("", file=out)
        click.echo(normalised_table(results), file=out)

    with StagedOutputs() as staged:
        if "--json" in outputs:
            with staged.open(outputs["--json"]) as fh:
                write_json(fh, results, {"seed": seed})
        if "--jobs-csv" in outputs:
            with staged.open(outputs["--jobs-csv"]) as fh:
                write_jobs_csv(fh, results)
        if "--plot" in outputs:
            from teiresias.simulator.plots import plot_results

            image = _render_plot(
                plot or "", plot_fmt, lambda buf: plot_results(buf, results, title=Path(trace_path).name, fmt=plot_fmt)
            )
            with staged.open(outputs["--plot"], "wb") as fh:
                fh.write(image)
        if "--report" in outputs:
            from teiresias import __version__
            from teiresias.simulator.html_report import RunInfo, write_html

            info = RunInfo(
                trace_name=Path(trace_path).name,
                jobs=len(trace),
                nodes=len(cluster.nodes),
                gpus=cluster.total_gpus,
                interval=interval,
                preempt_overhead=preempt_overhead,
                placement=placement + (" in HiveD cells" if cells_path else ""),
                version=__version__,
            )
            with staged.open(outputs["--report"]) as fh:
                write_html(fh, results, trace, info)
    if to_stdout_json:
        write_json(sys.stdout, results, {"seed": seed})


def _render_plot(plot: str, fmt: str, draw: Callable[[io.BytesIO], None]) -> bytes:
    """The image ``draw`` makes, in memory: matplotlib's own failures are told apart
    from a failure to write the file (that one is the output's, teiresias/outputs.py)."""
    buf = io.BytesIO()
    try:
        draw(buf)
    except (RuntimeError, OSError, ValueError) as exc:
        # e.g. .pgf without LaTeX: matplotlib lists the format but cannot write it here.
        raise ConfigError(
            f"--plot {plot}: matplotlib could not write .{fmt} "
            f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}); "
            "choose another format, e.g. .png"
        ) from None
    return buf.getvalue()


# What a sweep reads from the command line; every other option is the spec's business.
_SWEEP_OPTIONS = frozenset({"sweep_path", "on_slurm", "partition", "workers", "workdir", "json_out", "csv_out", "plot"})


def _refuse_single_run_options(ctx: click.Context) -> None:
    """An option of a single replay given beside --sweep would be ignored: refuse it instead."""
    from click.core import ParameterSource

    for param in ctx.command.params:
        name = param.name or ""
        if name in _SWEEP_OPTIONS or ctx.get_parameter_source(name) in (None, ParameterSource.DEFAULT):
            continue
        flag = "/".join(param.opts)
        raise ConfigError(
            f"{flag} is an option of a single replay and --sweep would ignore it: a sweep takes its "
            f"traces and knobs from SPEC.yaml (docs/simulator.md, 'Sweeps'); drop {param.opts[-1]}"
        )


def _sweep(
    spec_path: str,
    on_slurm: bool,
    partition: str | None,
    workers: int | None,
    workdir: str | None,
    json_out: str | None,
    csv_out: str | None,
    plot: str | None,
) -> None:
    """``--sweep``: every run of the spec, locally or as a Slurm array, merged into one table."""
    import json
    import time

    from teiresias.outputs import StagedOutputs, check_folder, check_outputs
    from teiresias.simulator import sweep

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers} must be >= 1")
    if partition is not None and not on_slurm:
        raise ConfigError("--partition goes with --on-slurm; add --on-slurm or drop --partition")
    plot_fmt = "png"
    if plot is not None:
        from teiresias.simulator.plots import plot_format

        plot_fmt = plot_format(plot)
    spec = sweep.load_spec(spec_path)
    inputs: list[tuple[str, str | Path | None]] = [
        ("--sweep", spec_path),
        ("cluster:", spec.cluster),
        ("gittins_samples:", spec.gittins_samples),
    ]
    inputs += [("traces:", t) for t in spec.traces]
    if spec.synth is not None:
        inputs.append(("synth.samples:", spec.synth.samples))
    outputs = {
        o.flag: o
        for o in check_outputs((("--json", json_out), ("--csv", csv_out), ("--plot", plot)), inputs, ("--json",))
    }
    wd = Path(workdir) if workdir else Path.cwd() / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    check_folder(wd, "--workdir")
    runs = sweep.expand(spec, wd)
    out = sys.stderr if json_out == "-" else sys.stdout
    where = (
        "a Slurm job array" + (f" on partition {partition}" if partition else "")
        if on_slurm
        else f"{min(workers or os.cpu_count() or 1, len(runs))} local process(es)"
    )
    click.echo(f"{Path(spec_path).name}: {len(runs)} runs on {where}", file=out)
    if on_slurm:
        job_id, rows = sweep.run_on_slurm(runs, wd.resolve(), partition)
        click.echo(f"array job {job_id}: {len(rows)} results in {wd}", file=out)
    else:
        rows = sweep.run_local(runs, workers)
    rows = sweep.add_ratios(rows)
    click.echo(sweep.table(rows), file=out)
    with StagedOutputs() as staged:
        if "--json" in outputs:
            with staged.open(outputs["--json"]) as fh:
                json.dump(rows, fh, indent=2)
        if "--csv" in outputs:
            with staged.open(outputs["--csv"]) as fh:
                sweep.write_csv(fh, rows)
        if "--plot" in outputs:
            image = _render_plot(plot or "", plot_fmt, lambda buf: sweep.plot(buf, rows, fmt=plot_fmt))
            with staged.open(outputs["--plot"], "wb") as fh:
                fh.write(image)
    if json_out == "-":
        json.dump(rows, sys.stdout, indent=2)
