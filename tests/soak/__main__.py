"""The soak's long form (`scripts/soak`): a seeded random workload and faults on
a local 4 x 4 cluster with accounting, then every invariant checked
(tests/soak/invariants.py). docs/benchmarks.md "Soak" has the commands and the
last figures."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from slurm_plugin.localcluster import LocalCluster
from tests.soak.collect import load
from tests.soak.driver import Driver, SoakConfig, soak_cluster_config
from tests.soak.invariants import check
from tests.soak.report import format_summary, format_violation, summary
from tests.soak.workload import FAULTS, generate

DEFAULT_DIR = "/var/tmp/teiresias-soak"
DEFAULT_PORT_BASE = 17400


def report(run_dir: Path, as_json: bool) -> int:
    """Check a finished run folder; print the violations and the summary. 0: none, 1: some."""
    obs = load(run_dir)
    res = check(obs)
    s = summary(obs, res)
    texts = [format_violation(obs, v) for v in res.violations]
    (run_dir / "report.txt").write_text("\n\n".join([*texts, format_summary(s)]) + "\n")
    (run_dir / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    if as_json:
        click.echo(json.dumps({"run_dir": str(run_dir), "summary": s, "violations": texts}))
    else:
        for t in texts:
            click.echo(t + "\n")
        click.echo(format_summary(s))
        click.echo(f"run folder: {run_dir}")
    return 1 if res.violations else 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-s", "--seed", type=int, default=20, show_default=True, help="Workload and faults are drawn from it.")
@click.option("-m", "--minutes", type=click.FloatRange(0.5, 24 * 60), default=60.0, show_default=True)
@click.option("-n", "--jobs", type=click.IntRange(1, 100_000), default=None, help="Submissions (default: 40 a minute).")
@click.option(
    "-t", "--torch-jobs", type=click.IntRange(0, 1000), default=None, help="PyTorch jobs (default: 1 per 5 min)."
)
@click.option(
    "-d",
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"The soak cluster's folder (default: $TEIRESIAS_SOAK_DIR, else {DEFAULT_DIR}).",
)
@click.option(
    "-p",
    "--port-base",
    type=click.IntRange(1024, 65000),
    default=None,
    help=f"Its ports, base..base+6 (default: $TEIRESIAS_SOAK_PORT_BASE, else {DEFAULT_PORT_BASE}).",
)
@click.option(
    "-f",
    "--faults",
    "fault_kinds",
    default=",".join(FAULTS),
    show_default=True,
    help="Fault kinds to inject, comma-separated (empty: none).",
)
@click.option(
    "--poll", type=click.FloatRange(0.5, 30), default=2.0, show_default=True, help="Controller poll interval (s)."
)
@click.option("-k", "--keep", is_flag=True, help="Leave the soak cluster running afterwards.")
@click.option(
    "-c",
    "--check",
    "check_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Only check a finished run folder again (nothing is started).",
)
@click.option("-j", "--json", "as_json", is_flag=True, help="One JSON object: summary and violations.")
def main(
    seed: int,
    minutes: float,
    jobs: int | None,
    torch_jobs: int | None,
    directory: Path | None,
    port_base: int | None,
    fault_kinds: str,
    poll: float,
    keep: bool,
    check_dir: Path | None,
    as_json: bool,
) -> None:
    """Soak the controller: a random workload of the whole sbatch grammar and real
    faults on a local cluster, then every invariant checked from sacct, the audit
    log and the state DB. Exit 0: every invariant held; 1: violations (each printed
    with its job, the seed and the job's events); 2: bad input.

    \b
    Examples:
      scripts/soak --seed 7 --minutes 60              # the long form: ~2400 jobs
      scripts/soak -s 20 -m 2 -n 36 -t 1              # the short form's workload (tests/soak/test_soak.py)
      scripts/soak --check /var/tmp/teiresias-soak/runs/seed7-1795780000   # re-check a run
    """
    if check_dir is not None:
        sys.exit(report(check_dir, as_json))
    if os.geteuid() != 0:
        click.echo("soak: needs root (it starts a local Slurm cluster and makes the soak_* users)", err=True)
        sys.exit(2)
    directory = directory or Path(os.environ.get("TEIRESIAS_SOAK_DIR", DEFAULT_DIR))
    port_base = port_base or int(os.environ.get("TEIRESIAS_SOAK_PORT_BASE", DEFAULT_PORT_BASE))
    jobs = jobs if jobs is not None else max(1, round(40 * minutes))
    torch_jobs = torch_jobs if torch_jobs is not None else max(1, round(minutes / 5))
    kinds = tuple(k for k in fault_kinds.split(",") if k)
    if set(kinds) - set(FAULTS):
        click.echo(
            f"soak: unknown fault kind(s) {', '.join(sorted(set(kinds) - set(FAULTS)))}; known: {', '.join(FAULTS)}",
            err=True,
        )
        sys.exit(2)
    workload = generate(seed, duration_s=minutes * 60, jobs=jobs, torch_jobs=torch_jobs, fault_kinds=kinds)
    cluster = LocalCluster(soak_cluster_config(directory, port_base))
    run_dir = directory / "runs" / f"seed{seed}-{int(time.time())}"
    run_dir.mkdir(parents=True)
    cfg = SoakConfig(poll_interval=poll, drain_s=60.0, drain_cap_s=max(120.0, 15 * minutes))
    click.echo(f"soak: seed {seed}, {jobs} submissions over {minutes:g} min, run folder {run_dir}", err=True)
    try:
        Driver(workload, cluster, run_dir, cfg, say=lambda line: click.echo(line, err=True)).run()
    finally:
        if not keep:
            cluster.down()
    sys.exit(report(run_dir, as_json))


if __name__ == "__main__":
    main()
