"""``teiresias trace``: generate and check Tiresias-format traces."""

from __future__ import annotations

import json
import sys

import click

from teiresias.errors import ConfigError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def trace() -> None:
    """Generate (synth), validate (check) and convert (from-sacct) Tiresias-format job traces.

    \b
    Examples:
      teiresias trace synth --kind testbed --seed 1 -o testbed.csv
      teiresias trace synth --kind philly -n 10000 --samples yarn-gput10000.csv \\
          --cluster etc/cluster.yaml --load 0.9 -o philly.csv
      teiresias trace check philly.csv --cluster etc/cluster.yaml
      sacct -a -S 2024-05-01 -E 2024-06-01 --json > may.json
      teiresias trace from-sacct may.json -o may.csv
    """


@trace.command()
@click.option(
    "-k",
    "--kind",
    type=click.Choice(["testbed", "philly", "teams"]),
    default="testbed",
    show_default=True,
    help="testbed: Tiresias §5.1's 480-job mix; philly: GPU-time drawn from --samples; teams: philly "
    "jobs from --teams teams, each with its own sizes and lengths, submitted in bursts.",
)
@click.option("-o", "--output", required=True, metavar="OUT.csv", help="Where to write the trace ('-' = stdout).")
@click.option("-n", "--jobs", "num_jobs", type=int, default=1000, show_default=True, help="philly: number of jobs.")
@click.option(
    "-S",
    "--samples",
    default=None,
    metavar="FILE",
    help="philly: job GPU-time samples, CSV column 'duration' (e.g. yarn-gput10000.csv).",
)
@click.option(
    "-c",
    "--cluster",
    "cluster_path",
    default=None,
    metavar="SPEC",
    help="Cluster the trace is for: no job asks more GPUs than it has (testbed: larger jobs ask "
    "for all of them); philly: its GPU count also sets the load.",
)
@click.option("-G", "--cluster-gpus", type=int, default=None, help="GPU count instead of --cluster.")
@click.option(
    "-l",
    "--load",
    type=float,
    default=0.9,
    show_default=True,
    help="philly: offered load (asked GPU-seconds per second / GPUs).",
)
@click.option("-r", "--arrival-rate", type=float, default=None, help="philly: jobs per second (overrides --load).")
@click.option(
    "--gpu-mix",
    default=None,
    metavar="G:W,...",
    help="philly: GPU-count weights. [default: the testbed mix 1:240,2:40,4:80,8:90,16:25,32:5]",
)
@click.option("--min-duration", type=float, default=None, help="Shortest job, seconds. [testbed 120, philly 60]")
@click.option(
    "--max-duration",
    type=float,
    default=None,
    help="Longest job, seconds; 0 = no cap. [testbed 7200, philly 604800 (7 days)]",
)
@click.option("--max-gpus", type=int, default=None, help="philly: drop GPU sizes above this.")
@click.option("--mean-interarrival", type=float, default=30.0, show_default=True, help="testbed: mean gap, s.")
@click.option("-s", "--seed", type=int, default=0, show_default=True)
@click.option(
    "-A",
    "--apps",
    "num_apps",
    type=int,
    default=None,
    metavar="N",
    help="Group the jobs into N apps (an 'app' column for themis): each app a run of "
    "consecutive submissions (a search), of random sizes. [default: no app column]",
)
@click.option("--teams", type=int, default=1, show_default=True, help="teams: how many teams' jobs to merge.")
@click.option(
    "-T",
    "--time-limits",
    "limit_model",
    type=click.Choice(["none", "max", "exact", "round", "user"]),
    default="none",
    show_default=True,
    help="A time_limit column as Slurm users declare it: max (all at --max-time-limit), exact (the "
    "run time), round (the next of 1h 2h 4h 8h 12h 1d 2d 3d 7d), user (round after a random "
    "over-estimate, --at-max of the jobs at the maximum; docs/simulator.md).",
)
@click.option(
    "--max-time-limit",
    type=float,
    default=7 * 86400.0,
    show_default=True,
    metavar="SECONDS",
    help="The partition's maximum time limit.",
)
@click.option(
    "--at-max", type=float, default=0.2, show_default=True, metavar="SHARE", help="user: share of jobs at the maximum."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary of the trace on stdout.")
def synth(
    kind: str,
    output: str,
    num_jobs: int,
    samples: str | None,
    cluster_path: str | None,
    cluster_gpus: int | None,
    load: float,
    arrival_rate: float | None,
    gpu_mix: str | None,
    min_duration: float | None,
    max_duration: float | None,
    max_gpus: int | None,
    mean_interarrival: float,
    seed: int,
    as_json: bool,
    num_apps: int | None = None,
    teams: int = 1,
    limit_model: str = "none",
    max_time_limit: float = 7 * 86400.0,
    at_max: float = 0.2,
) -> None:
    """Write a synthetic Tiresias-format trace (seeded: same flags, same file).

    The public Philly GPU-time samples ship with teiresias (attribution in
    teiresias/data/ATTRIBUTION.txt): teiresias/data/yarn-gput10000.csv.

    \b
    Example:
      teiresias trace synth -c etc/cluster.yaml -o testbed.csv
      teiresias trace synth --kind philly -n 2000 -S teiresias/data/yarn-gput10000.csv -G 64 --load 1.2 -o t.csv
      teiresias trace synth --kind teams --teams 15 -n 2000 -S teiresias/data/yarn-gput10000.csv -G 192 \\
          --load 4.5 --max-duration 86400 --time-limits user -o t.csv
    """
    from teiresias.outputs import check_outputs
    from teiresias.simulator.synth import (
        LimitParams,
        PhillyParams,
        TeamsParams,
        parse_gpu_mix,
        philly_like,
        teams_like,
        testbed_mix,
        with_time_limits,
    )
    from teiresias.simulator.trace import write_trace, write_trace_to

    _refuse_ignored(click.get_current_context(), kind)
    if cluster_path is not None and cluster_gpus is not None:
        raise ConfigError(
            f"give -c/--cluster {cluster_path} or -G/--cluster-gpus {cluster_gpus}, not both: "
            "both size the trace for a cluster"
        )
    checked = check_outputs((("-o", output),), (("-S", samples), ("-c", cluster_path)), stdout=("-o",))
    if kind == "testbed":
        cap = cluster_gpus
        if cluster_path is not None:
            from teiresias.clusterspec import load_cluster

            cap = load_cluster(cluster_path).total_gpus
        jobs = testbed_mix(
            seed=seed,
            mean_interarrival=mean_interarrival,
            min_duration=120.0 if min_duration is None else min_duration,
            max_duration=7200.0 if max_duration is None else max_duration,
            max_gpus=cap,
        )
    else:
        if samples is None:
            raise ConfigError("--kind philly needs --samples FILE: job GPU-time samples, one 'duration' column")
        if cluster_path is not None:
            from teiresias.clusterspec import load_cluster

            cl = load_cluster(cluster_path)
            gpus, per_node_cap = cl.total_gpus, cl.total_gpus
        elif cluster_gpus is not None:
            gpus, per_node_cap = cluster_gpus, cluster_gpus
        else:
            raise ConfigError("--kind philly needs --cluster SPEC or --cluster-gpus N to size the load")
        from teiresias.policy.gittins import ServiceDistribution

        dist = ServiceDistribution.from_samples_file(samples)
        params = PhillyParams(
            num_jobs=num_jobs,
            cluster_gpus=gpus,
            load=load,
            arrival_rate=arrival_rate,
            gpu_mix=parse_gpu_mix(gpu_mix) if gpu_mix else None,
            min_duration=60.0 if min_duration is None else min_duration,
            max_duration=PhillyParams.max_duration if max_duration is None else (max_duration or None),
            max_gpus=min(max_gpus or per_node_cap, per_node_cap),
        )
        if kind == "philly":
            jobs = philly_like(dist.samples, params, seed=seed)
        else:
            if arrival_rate is not None:
                raise ConfigError("--kind teams takes --load, not --arrival-rate (bursts are spread to meet the load)")
            jobs = teams_like(
                dist.samples,
                TeamsParams(
                    num_jobs=num_jobs,
                    cluster_gpus=gpus,
                    load=load,
                    num_teams=teams,
                    gpu_mix=params.gpu_mix,
                    min_duration=params.min_duration,
                    max_duration=params.max_duration,
                    max_gpus=params.max_gpus,
                ),
                seed=seed,
            )
    if num_apps is not None:
        if num_apps < 1:
            raise ConfigError(f"--apps {num_apps} must be >= 1 (the number of apps to group the jobs into)")
        from teiresias.simulator.synth import with_apps

        jobs = with_apps(jobs, num_apps, seed)
    if limit_model != "none":
        jobs = with_time_limits(jobs, LimitParams(limit_model, max_time_limit, at_max), seed)
    if output == "-":
        write_trace_to(sys.stdout, jobs)
    else:
        write_trace(checked[0], jobs)
    summary = _describe(jobs)
    if as_json:
        # With the trace itself on stdout, the summary goes to stderr.
        click.echo(json.dumps({"kind": kind, "output": output, "seed": seed, **summary}), err=output == "-")
    elif output != "-":
        click.echo(
            f"wrote {output}: {summary['jobs']} jobs, {summary['gpu_seconds']:.0f} GPU-s, span {summary['span']:.0f} s",
            err=True,
        )


# Options one kind reads and the other would ignore: given to the other, they are refused.
_PHILLY_ONLY = ("num_jobs", "samples", "load", "arrival_rate", "gpu_mix", "max_gpus")
_TESTBED_ONLY = ("mean_interarrival",)


def _refuse_ignored(ctx: click.Context, kind: str) -> None:
    from click.core import ParameterSource

    ignored = _PHILLY_ONLY if kind == "testbed" else _TESTBED_ONLY
    for param in ctx.command.params:
        if param.name in ignored and ctx.get_parameter_source(param.name) not in (None, ParameterSource.DEFAULT):
            other = "philly" if kind == "testbed" else "testbed"
            raise ConfigError(f"{'/'.join(param.opts)} is read by --kind {other} only; drop it or add --kind {other}")


def _describe(jobs) -> dict:
    gpus: dict[int, int] = {}
    for j in jobs:
        gpus[j.num_gpus] = gpus.get(j.num_gpus, 0) + 1
    return {
        "jobs": len(jobs),
        "gpu_seconds": float(sum(j.num_gpus * j.duration for j in jobs)),
        "span": float(max(j.submit_time for j in jobs) - min(j.submit_time for j in jobs)) if jobs else 0.0,
        "gpus": {str(k): v for k, v in sorted(gpus.items())},
    }


@trace.command()
@click.argument("trace_path", metavar="TRACE.csv")
@click.option(
    "-c", "--cluster", "cluster_path", default=None, metavar="SPEC", help="Also reject jobs larger than this cluster."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def check(trace_path: str, cluster_path: str | None, as_json: bool) -> None:
    """Validate a trace; print its size. Exit 2 with FILE:LINE: problem if it is bad.

    \b
    Example:
      teiresias trace check trace.csv --cluster etc/cluster.yaml
    """
    from teiresias.simulator.trace import read_trace

    cluster = None
    if cluster_path is not None:
        from teiresias.clusterspec import load_cluster

        cluster = load_cluster(cluster_path)
    jobs = read_trace(trace_path, cluster)
    summary = _describe(jobs)
    if as_json:
        click.echo(json.dumps({"trace": trace_path, **summary}))
    else:
        mix = ", ".join(f"{v}x{k}" for k, v in summary["gpus"].items())
        click.echo(
            f"{trace_path}: ok, {summary['jobs']} jobs ({mix} GPUs), "
            f"{summary['gpu_seconds']:.0f} GPU-s, span {summary['span']:.0f} s"
        )


def _users_from_sacct(job_ids: tuple[int, ...]) -> dict[int, str]:
    """job id -> User as ``sacct --parsable2`` gives it (resolved from the job's uid);
    {} when sacct is missing or does not answer."""
    import subprocess

    try:
        r = subprocess.run(
            ["sacct", "-a", "-X", "-D", "-n", "-P", "-j", ",".join(map(str, job_ids)), "-o", "JobIDRaw,User"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    out: dict[int, str] = {}
    for line in r.stdout.splitlines() if r.returncode == 0 else []:
        job, _, user = line.partition("|")
        if job.isdigit() and user.strip():
            out[int(job)] = user.strip()
    return out


@trace.command("from-sacct")
@click.argument("sacct_path", metavar="SACCT_OUTPUT")
@click.option("-o", "--output", required=True, metavar="OUT.csv", help="Where to write the trace ('-' = stdout).")
@click.option(
    "-r",
    "--requeued",
    type=click.Choice(["sum", "last"]),
    default="sum",
    show_default=True,
    help="Run time of a requeued job: all its runs added (checkpointing jobs) or its last run "
    "alone (jobs that restart from scratch).",
)
@click.option(
    "-S",
    "--samples",
    "samples_out",
    default=None,
    metavar="OUT.csv",
    help="Also write the jobs' GPU-times (GPUs x run time) as a 'duration' column, the "
    "samples simulate's --gittins-samples reads (best from an earlier period).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (jobs, skipped and why, origin).")
def from_sacct(sacct_path: str, output: str, requeued: str, samples_out: str | None, as_json: bool) -> None:
    """Convert Slurm accounting (sacct --json or --parsable2 output) into a trace.

    One row per finished job that held GPUs: GPUs from AllocTRES, run time
    (Slurm's Elapsed), submit time in seconds after the first submission,
    job name as model, user and account (a --json record without a user, as
    Slurm writes one for a user without an association, takes the user
    sacct --parsable2 names). A requeued job (its earlier runs are REQUEUED
    records) is one row submitted when first submitted. Jobs without
    GPUs, never started, or not finished are left out and counted.
    SACCT_OUTPUT '-' reads stdin.

    \b
    Example:
      sacct -a -S 2024-05-01 -E 2024-06-01 --json > may.json
      teiresias trace from-sacct may.json -o may.csv -S may-gput.csv
      teiresias simulate -t may.csv -c etc/cluster.yaml -p fifo,las,gittins -g april-gput.csv
    \b
      # or, with --parsable2 (-D keeps the runs of requeued jobs):
      sacct -a -X -D -S 2024-05-01 --parsable2 \\
          -o JobIDRaw,Cluster,JobName,User,Account,State,Submit,Start,End,Elapsed,AllocTRES > may.txt
    """
    from datetime import datetime, timezone

    from teiresias import yamlconf
    from teiresias.errors import TraceError
    from teiresias.outputs import StagedOutputs, check_outputs
    from teiresias.simulator.sacct import parse_sacct
    from teiresias.simulator.trace import write_trace_to

    # Before reading a month of accounting.
    outputs = {
        o.flag: o for o in check_outputs((("-o", output), ("-S", samples_out)), (("", sacct_path),), stdout=("-o",))
    }
    path = "/dev/stdin" if sacct_path == "-" else sacct_path
    text = yamlconf.read_text(path, "sacct output", TraceError)
    source = "stdin" if sacct_path == "-" else sacct_path
    conv = parse_sacct(text, source, requeued=requeued)
    if conv.no_user:
        # sacct --json (22.05) writes user null, and no uid, for a user without an
        # association; --parsable2 resolves the uid: take the same user from it.
        users = _users_from_sacct(conv.no_user)
        if users:
            conv = parse_sacct(text, source, requeued=requeued, users=users)
        if conv.no_user:
            click.echo(
                f"teiresias trace from-sacct: warning: {len(conv.no_user)} job(s) have no user in the sacct"
                " --json output (users without a Slurm association) and sacct here could not name them"
                " (run this where sacct reaches that accounting, or convert sacct --parsable2 output);"
                " their user column is empty",
                err=True,
            )
    with StagedOutputs() as staged:  # the trace and the samples, both or neither
        if "-o" in outputs:
            with staged.open(outputs["-o"]) as fh:
                write_trace_to(fh, conv.jobs)
        if "-S" in outputs:
            with staged.open(outputs["-S"]) as fh:
                fh.write("duration\n" + "".join(f"{j.num_gpus * j.duration:g}\n" for j in conv.jobs))
    if output == "-":
        write_trace_to(sys.stdout, conv.jobs)
    summary = _describe(conv.jobs)
    origin = datetime.fromtimestamp(conv.origin, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if as_json:
        click.echo(
            json.dumps(
                {
                    "input": sacct_path,
                    "output": output,
                    "format": conv.format,
                    "records": conv.records,
                    "skipped": conv.skipped,
                    "requeued_jobs": conv.requeued_jobs,
                    "renumbered": conv.renumbered,
                    "origin": conv.origin,
                    "origin_time": origin,
                    **summary,
                }
            ),
            err=output == "-",
        )
        return
    skipped = ", ".join(f"{v} {k}" for k, v in conv.skipped.items()) or "none"
    where = f"wrote {output}" if output != "-" else "trace on stdout"
    click.echo(
        f"{where}: {summary['jobs']} jobs, {summary['gpu_seconds']:.0f} GPU-s, span {summary['span']:.0f} s "
        f"from {origin}{'' if conv.format == 'json' else ' (sacct local time)'}; "
        f"{conv.requeued_jobs} requeued job(s) merged; left out: {skipped}"
        + ("; job ids renumbered (not unique across clusters)" if conv.renumbered else ""),
        err=True,
    )
