"""``teiresias cluster up|down|status``: the local Slurm cluster.

Exit codes: 0 ok; 1 the cluster could not be started/stopped, or (status)
is not fully up; 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from slurm_plugin.localcluster import (
    DEFAULT_DIR,
    DEFAULT_PORT_BASE,
    ClusterConfig,
    LocalCluster,
    LocalClusterError,
    config_from_dir,
)

_dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_DIR,
    envvar="TEIRESIAS_CLUSTER_DIR",
    show_default=True,
    help="Directory holding the cluster's configuration, state, logs and pid files (env TEIRESIAS_CLUSTER_DIR).",
)


def _fail(exc: LocalClusterError) -> None:
    click.echo(f"teiresias cluster: error: {exc}", err=True)
    sys.exit(1)


def _progress(quiet: bool):
    return (lambda msg: None) if quiet else (lambda msg: click.echo(f"cluster: {msg}", err=True))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cluster() -> None:
    """Start, stop and inspect the local Slurm cluster (fake GPUs, one host).

    \b
    Examples:
      teiresias cluster up -n 4 -g 4
      teiresias cluster up --accounting      # + slurmdbd and MariaDB: sacct works
      eval "$(teiresias cluster up --quiet | grep ^export)"
      teiresias cluster status --json
      teiresias cluster down
    """


@cluster.command()
@click.option("-n", "--nodes", type=int, default=4, show_default=True, help="Number of nodes.")
@click.option("-g", "--gpus-per-node", type=int, default=4, show_default=True, help="Fake GPUs per node.")
@click.option("-c", "--cpus-per-node", type=int, default=8, show_default=True, help="CPUs per node.")
@_dir_option
@click.option(
    "-p",
    "--port-base",
    type=int,
    default=DEFAULT_PORT_BASE,
    envvar="TEIRESIAS_CLUSTER_PORT_BASE",
    show_default=True,
    help="slurmctld port; node i listens on PORT_BASE+i.",
)
@click.option(
    "--partitions",
    default="gpu,other",
    show_default=True,
    help="Comma-separated partitions over all nodes; the first is the default one.",
)
@click.option(
    "--restd/--no-restd",
    default=False,
    show_default=True,
    help="Also start slurmrestd on DIR/run/slurmrestd.sock (rest_auth/local).",
)
@click.option(
    "--job-submit-lua",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Install FILE as job_submit.lua beside slurm.conf and set JobSubmitPlugins=lua.",
)
@click.option(
    "-a",
    "--accounting/--no-accounting",
    default=False,
    show_default=True,
    help="Also run slurmdbd with its own MariaDB (installed if missing; slurmdbd on "
    "PORT_BASE+NODES+1, MariaDB on +2), so that sacct works.",
)
@click.option(
    "--shards",
    "shards_per_gpu",
    type=int,
    default=0,
    show_default=True,
    metavar="K",
    help="GPU sharing: K gres/shard per GPU, one gres Type per GPU (g0, g1, ...) so that the "
    "controller puts each shard job on the GPU it chose (GresTypes=gpu,shard; docs/gandiva.md); "
    "0 = no shards.",
)
@click.option(
    "-e",
    "--events/--no-events",
    default=False,
    show_default=True,
    help="EpilogSlurmctld pokes a controller listening on DIR/run/teiresias-events.sock at "
    'every job end (docs/controller.md "Events"). Slurm 22.05 then no longer starts '
    "the next pending job by itself when a job ends (it waits for the next backfill "
    "cycle): for clusters whose GPU jobs the controller starts.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def up(
    nodes: int,
    gpus_per_node: int,
    cpus_per_node: int,
    directory: Path,
    port_base: int,
    partitions: str,
    restd: bool,
    job_submit_lua: Path | None,
    accounting: bool,
    quiet: bool,
    as_json: bool,
    shards_per_gpu: int = 0,
    events: bool = False,
) -> None:
    """Start the cluster (installing Slurm packages if missing); idempotent.

    Exits 0 once every node accepts jobs. Re-running with the same options
    does nothing; changed options restart the daemons and keep Slurm's state.

    \b
    Example:
      teiresias cluster up --nodes 4 --gpus-per-node 4 --dir /tmp/c1 --port-base 21000
      export SLURM_CONF=/tmp/c1/etc/slurm.conf; sinfo
    """
    cfg = ClusterConfig(
        dir=directory,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_node=cpus_per_node,
        port_base=port_base,
        partitions=tuple(p.strip() for p in partitions.split(",") if p.strip()),
        job_submit_lua=job_submit_lua,
        accounting=accounting,
        shards_per_gpu=shards_per_gpu,
        events=events,
    )
    try:
        res = LocalCluster(cfg, _progress(quiet)).up(restd=restd)
    except LocalClusterError as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(
            json.dumps(dict(res.to_dict(), SLURM_CONF=res.conf, nodes=list(cfg.node_names), accounting=cfg.accounting))
        )
        return
    what = "started " + ", ".join(res.started) if res.started else "already running, nothing to do"
    click.echo(
        f"cluster ready: {cfg.nodes} nodes x {cfg.gpus_per_node} GPUs, partitions "
        f"{','.join(cfg.partitions)} ({what}; {res.seconds:.1f}s)"
    )
    click.echo(f"SLURM_CONF={res.conf}")
    if res.restd_socket:
        click.echo(f"SLURMRESTD_SOCKET={res.restd_socket}")
    if cfg.accounting:
        click.echo(f"accounting: slurmdbd on {_where(cfg.dbd_port)}, MariaDB on {_where(cfg.mysql_port)}")
    click.echo(f"export SLURM_CONF={res.conf}")


def _where(port: int) -> str:
    """Where ``port`` really listens (the kernel's word, not the configuration's):
    slurmdbd takes DbdAddr as the address its clients use and listens on every one."""
    from slurm_plugin.localcluster.procs import listen_addresses

    addrs = listen_addresses(port)
    if not addrs:
        return f"port {port} (not listening)"
    text = ", ".join(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addrs)
    if any(a in ("0.0.0.0", "::") for a in addrs):
        text += " (every address: Slurm has no setting to bind it to one; munge authenticates its clients)"
    return text


@cluster.command()
@_dir_option
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print what was stopped as JSON.")
def down(directory: Path, quiet: bool, as_json: bool) -> None:
    """Cancel every job, then stop every process of the cluster (by pid).

    State is kept for the next `up`; delete DIR to start afresh.

    \b
    Example:
      teiresias cluster down --dir /tmp/c1
    """
    if not directory.exists():
        stopped: list[str] = []
    else:
        try:
            stopped = LocalCluster(config_from_dir(directory), _progress(quiet)).down()
        except LocalClusterError as exc:
            _fail(exc)
            return
    if as_json:
        click.echo(json.dumps({"dir": str(directory), "stopped": stopped}))
    else:
        click.echo("stopped " + ", ".join(stopped) if stopped else "nothing was running")


@cluster.command()
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(directory: Path, as_json: bool) -> None:
    """Show the cluster's processes and nodes; exit 0 only if all nodes are ready.

    \b
    Example:
      teiresias cluster status --json | jq .nodes
    """
    if not directory.exists():
        if as_json:
            click.echo(
                json.dumps({"dir": str(directory), "running": False, "ready": False, "processes": [], "nodes": {}})
            )
        else:
            click.echo(f"no cluster in {directory}")
        sys.exit(1)
    st = LocalCluster(config_from_dir(directory)).status()
    if as_json:
        click.echo(json.dumps(st.to_dict()))
    else:
        click.echo(f"dir        {st.dir}")
        click.echo(f"SLURM_CONF={st.conf}")
        for p in st.processes:
            click.echo(f"{p.name:<16} pid {p.pid if p.pid else '-':<8} {'running' if p.alive else 'stopped'}")
        for name, state in st.nodes.items():
            click.echo(f"{name:<16} {state}")
        if st.restd_socket:
            click.echo(f"slurmrestd       {st.restd_socket}")
        if st.accounting:
            click.echo("accounting       sacct answers")
        click.echo("ready" if st.ready else ("up, not all nodes ready" if st.running else "down"))
    sys.exit(0 if st.ready else 1)
