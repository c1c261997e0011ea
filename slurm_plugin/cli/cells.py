"""``teiresias cells``: HiveD virtual clusters at a glance (sinfo-like).

Offline it shows the configuration with an empty binding; with ``--state``
(the controller's state database, or a JSON file holding a binding) it shows
the live binding: bound and used cells per VC, guaranteed and opportunistic
jobs, lost guarantee, fragmentation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from teiresias.errors import ConfigError

_DEFAULT_CONFIGS = ("etc/cells.yaml", "etc/cells.example.yaml")


def _find_config(path: str | None, controller_config: str | None = None) -> Path:
    """--config, else $TEIRESIAS_CELLS, else the ``cells:`` of the site's config
    (``--controller-config``, $TEIRESIAS_CONFIG, /etc/teiresias/teiresias.yaml),
    else a clone's etc/cells.yaml or etc/cells.example.yaml."""
    if path:
        return Path(path)
    env = os.environ.get("TEIRESIAS_CELLS")
    if env:
        return Path(env)
    site = _site_config(controller_config)
    if site is not None and site.cells is not None:
        return site.cells
    for p in _DEFAULT_CONFIGS:
        if Path(p).exists():
            return Path(p)
    raise ConfigError(
        f"no cells configuration found: {_site_path(controller_config)} names none; pass --config FILE"
        " (see etc/cells.example.yaml) or set TEIRESIAS_CELLS"
    )


def _site_path(controller_config: str | None) -> Path:
    from teiresias.jobfiles import config_path

    return Path(controller_config) if controller_config else config_path(os.environ)


def _site_config(controller_config: str | None):
    """The site's config when it exists (an explicit one must load), else None."""
    from slurm_plugin.config import load_config

    path = _site_path(controller_config)
    if controller_config is None and not path.exists():
        return None
    return load_config(path)


def _load_state(path: str):
    """A CellsState from a JSON file or from the controller's state database (meta table)."""
    from teiresias.cells.state import META_KEY, CellsState

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--state {path}: no such file; give the controller's state database or a JSON binding")
    if p.suffix == ".json":
        from teiresias import yamlconf

        try:
            data = json.loads(yamlconf.read_text(p, "cells state"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--state {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return CellsState.from_json(data.get(META_KEY, data) if isinstance(data, dict) else data)
    from slurm_plugin.controller.state import StateStore

    try:
        store = StateStore(p, readonly_copy=True)
    except Exception as exc:  # sqlite3.DatabaseError and friends: not a state database
        raise ConfigError(
            f"--state {path}: not a controller state database ({exc}); "
            "give the state_db of the site's teiresias.yaml or a .json binding"
        ) from None
    try:
        text = store.get_meta(META_KEY)
    finally:
        store.close()
    if text is None:
        return CellsState()  # the controller has not run a cells round yet
    return CellsState.from_json(json.loads(text))


def _slurm_node_states(controller_config: str | None):
    """Slurm's nodes through the project's backend: (nodes, None), or (None, why not).

    Slurm is found as ``teiresias queue`` finds it: the site's config
    (``--controller-config``, $TEIRESIAS_CONFIG, /etc/teiresias/teiresias.yaml),
    else the environment (SLURM_CONF). A config that does not load is bad input.
    """
    from slurm_plugin.controller.runtime import make_backend
    from teiresias.errors import SlurmError

    site = _site_config(controller_config)
    try:
        if site is not None:
            backend = make_backend(site)
        else:
            from slurm_plugin.backends.select import select_backend

            backend = select_backend("auto")
        return backend.nodes(), None
    except (SlurmError, OSError) as exc:
        return None, str(exc)


def _node_faults(topo, slurm_nodes) -> dict[str, int]:
    """Unavailable GPUs per configured node, as the controller's snapshot counts them: all GPUs
    of a node Slurm will not start jobs on (DOWN, DRAIN, ...) or does not know."""
    by_name = {n.name: n for n in slurm_nodes}
    out: dict[str, int] = {}
    for name, nc in topo.node_cells.items():
        n = by_name.get(name)
        if n is None or not n.usable:
            out[name] = nc.gpus
    return out


def _fmt_jobs(ids) -> str:
    return ",".join(str(i) for i in ids) if ids else "-"


def format_report(report) -> str:
    header = (
        "VC",
        "ACCOUNTS",
        "CELL",
        "GPUS",
        "QUOTA",
        "BOUND",
        "USED_GPUS",
        "LOST",
        "LOST_GPUS",
        "GUARANTEED",
        "OPPORTUNISTIC",
    )
    rows: list[tuple[str, ...]] = []
    for vc in report.vcs:
        if not vc.quota:
            rows.append(
                (
                    vc.name,
                    ",".join(vc.accounts),
                    "-",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    _fmt_jobs(vc.guaranteed_jobs),
                    _fmt_jobs(vc.opportunistic_jobs),
                )
            )
        for k, q in enumerate(vc.quota):
            first = k == 0
            rows.append(
                (
                    vc.name if first else "",
                    ",".join(vc.accounts) if first else "",
                    q.type_name,
                    str(q.cell_gpus),
                    str(q.quota),
                    str(q.bound),
                    str(q.used_gpus),
                    str(q.lost),
                    str(q.lost_gpus),
                    _fmt_jobs(vc.guaranteed_jobs) if first else "",
                    _fmt_jobs(vc.opportunistic_jobs) if first else "",
                )
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    numeric = {3, 4, 5, 6, 7, 8}
    lines = []
    for r in [header, *rows]:
        cells = [c.rjust(widths[i]) if i in numeric else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
    free = ", ".join(f"{k}={v}" for k, v in sorted(report.free_cells.items())) or "none"
    lines.append("")
    lines.append(
        f"cluster: {report.total_gpus} GPUs on {report.nodes} nodes; "
        f"bad nodes: {','.join(report.bad_nodes) or 'none'}; free unbound cells: {free}"
    )
    lines.append(
        f"fragmentation: {report.fragmentation:.2f} (share of nodes partly held by guaranteed jobs); "
        f"opportunistic jobs of accounts in no VC: {_fmt_jobs(report.other_jobs)}"
    )
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--config",
    "config_path",
    default=None,
    metavar="FILE",
    help="Cells configuration. [default: $TEIRESIAS_CELLS, the site config's cells:, etc/cells.yaml,"
    " etc/cells.example.yaml]",
)
@click.option(
    "-s",
    "--state",
    "state_path",
    default=None,
    metavar="DB|FILE.json",
    help="Live binding: the controller's state database, or a JSON binding. [default: none]",
)
@click.option(
    "-d",
    "--down",
    "down",
    default="",
    metavar="NODE[,NODE...]",
    help="Treat these nodes as DOWN/DRAIN (shows the guarantee the VCs would lose).",
)
@click.option(
    "-C",
    "--controller-config",
    "controller_config",
    default=None,
    metavar="FILE",
    help="The site's config: its cells file and the Slurm to read node states from. "
    "[default: $TEIRESIAS_CONFIG, else /etc/teiresias/teiresias.yaml; without one $SLURM_CONF]",
)
@click.option("--no-slurm", is_flag=True, help="Do not read node states from Slurm (bad nodes: --down only).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def cells(
    config_path: str | None,
    state_path: str | None,
    down: str,
    controller_config: str | None,
    no_slurm: bool,
    as_json: bool,
) -> None:
    """Show HiveD virtual clusters: quota, bound and used cells, jobs, fragmentation.

    Nodes Slurm reports DOWN or DRAIN (read through the controller's backend
    when a Slurm answers) are bad nodes, like those given with --down.

    \b
    Examples:
      teiresias cells --config etc/cells.example.yaml
      teiresias cells -c /etc/teiresias/cells.yaml --state /var/lib/teiresias/state.db --json
      teiresias cells -c etc/cells.example.yaml --down node3     # what would VCs lose?
    """
    from teiresias.cells import config as cells_config
    from teiresias.cells.faults import bad_nodes_of
    from teiresias.cells.report import build_report
    from teiresias.cells.world import World

    cfg = cells_config.load(_find_config(config_path, controller_config))
    topo = cfg.topology()
    named = [n.strip() for n in down.split(",") if n.strip()]
    unknown = [n for n in named if n not in topo.node_cells]
    if unknown:
        raise ConfigError(
            f"--down {','.join(unknown)}: not in the cells configuration; nodes are: {','.join(topo.node_cells)}"
        )
    caps = {n: nc.gpus for n, nc in topo.node_cells.items()}
    state = _load_state(state_path) if state_path else None
    if no_slurm:
        slurm_nodes, why = None, "--no-slurm"
    else:
        slurm_nodes, why = _slurm_node_states(controller_config)
        if slurm_nodes is None:
            click.echo(
                f"teiresias cells: node states not read from Slurm ({why}); bad nodes are only those given with --down",
                err=True,
            )
    unavailable = _node_faults(topo, slurm_nodes) if slurm_nodes is not None else {}
    world = World(cfg, topo, bad_nodes_of(unavailable, caps, named), unavailable)
    skipped = world.load_state(state) if state is not None else []
    report = build_report(world)
    node_states = "slurm" if slurm_nodes is not None else f"not read: {why}"
    if as_json:
        out = report.to_json()
        out["config"] = str(cfg.source)
        out["live"] = state_path is not None
        out["node_states"] = node_states
        out["skipped_jobs"] = [int(j) for j in skipped]
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(format_report(report))
    click.echo(
        f"node states: {'read from Slurm' if slurm_nodes is not None else node_states}"
        + (f"; down/drained there: {','.join(sorted(unavailable))}" if unavailable else "")
    )
    if not state_path:
        click.echo("(offline: configuration only, nothing bound; pass --state for the live binding)")
    if skipped:
        click.echo(f"warning: jobs {_fmt_jobs(skipped)} hold cells the configuration no longer has; left out", err=True)
