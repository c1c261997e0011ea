"""`teiresias queue`: the managed jobs as teiresias sees them (squeue-like)."""

from __future__ import annotations

import json
import time

import click

from slurm_plugin.config import load_config
from slurm_plugin.controller.state import StateStore
from slurm_plugin.controller.view import build_rows, format_table
from teiresias.errors import ConfigError, SlurmError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Controller config (default: $TEIRESIAS_CONFIG, else etc/teiresias.yaml).")
@click.option("-u", "--user", "users", multiple=True, help="Only this user's jobs (repeatable).")
@click.option("-j", "--jobs", "job_ids", multiple=True, help="Only these job ids (repeatable or comma-separated).")
@click.option("-a", "--all", "show_all", is_flag=True, help="Include finished jobs.")
@click.option("--no-slurm", is_flag=True, help="Read the state DB only; do not ask Slurm for live states.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
def queue(config_path: str | None, users: tuple[str, ...], job_ids: tuple[str, ...], show_all: bool,
          no_slurm: bool, as_json: bool) -> None:
    """List managed jobs: queue (Q1..QK), attained GPU-time, Gittins index,
    state, placement, preemptions, why pending.

    Reads the controller's state DB (and Slurm for live states when it answers).

    \b
    Examples:
      teiresias queue
      teiresias queue --json -u alice
      teiresias queue -j 42,43 --config etc/teiresias.yaml
    """
    config = load_config(config_path)
    wanted: set[int] = set()
    for item in job_ids:
        for part in item.split(","):
            if part.strip():
                try:
                    wanted.add(int(part))
                except ValueError:
                    raise ConfigError(f"--jobs: {part!r} is not a job id; give numbers like -j 42,43") from None
    if not config.state_db.exists():
        raise ConfigError(f"{config.state_db}: no controller state yet; start `teiresias controller run"
                          f" --config {config.path or 'FILE'}` first")
    store = StateStore(config.state_db, readonly_copy=True)
    try:
        records = list(store.jobs(active_only=not show_all).values())
    finally:
        store.close()
    slurm = None
    if not no_slurm:
        try:
            from slurm_plugin.controller.runtime import make_backend

            slurm = {j.job_id: j for j in make_backend(config).jobs()}
        except (SlurmError, OSError) as exc:
            click.echo(f"teiresias queue: Slurm did not answer ({exc}); showing the state DB only", err=True)
    records = [r for r in records if (not users or r.user in users) and (not wanted or r.job_id in wanted)]
    rows = build_rows(records, time.time(), slurm)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=None))
    else:
        click.echo(format_table(rows), nl=False)
