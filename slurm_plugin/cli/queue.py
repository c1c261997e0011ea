"""`teiresias queue`: the managed jobs as teiresias sees them (squeue-like).

What it shows, the controller keeps in its state DB (read through a read-only
connection, stateview.py); from Slurm it needs each job's live state and which
jobs the caller may see: one small ``squeue``, started first and answered while
the DB is read (cli/live.py). Modules only some sites need (Themis leases, Gandiva
slices) are imported when the DB holds their state: a command that prints a table
should not pay for the controller's loop (docs/benchmarks.md, "queue and explain").
"""

from __future__ import annotations

import json
import os
import sqlite3
import time

import click

from slurm_plugin.cli.live import LiveRead
from slurm_plugin.cli.options import config_option
from slurm_plugin.config import ControllerConfig, load_config
from slurm_plugin.controller.startup import slurm_env
from slurm_plugin.controller.stateview import StateView
from teiresias.errors import ConfigError

# Meta keys of the state DB read here (controller/leases.py, controller/slicing.py META_KEY).
THEMIS_KEY = "themis"
GANDIVA_KEY = "gandiva"


def parse_job_ids(items: tuple[str, ...]) -> set[int]:
    """``-j 42,43 -j 44`` -> {42, 43, 44}; anything but a positive whole number is bad input."""
    wanted: set[int] = set()
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) == 0:
                raise ConfigError(f"--jobs: {part!r} is not a job id; give positive numbers like -j 42,43")
            wanted.add(int(part))
    return wanted


def ask_slurm(config: ControllerConfig, no_slurm: bool) -> LiveRead:
    """Start the command's Slurm reads (none with --no-slurm but PrivateData's)."""
    return LiveRead(slurm_env(config), ask_slurm=not no_slurm)


def open_state(config: ControllerConfig) -> StateView:
    exists: bool | None
    folder: bool | None
    try:
        exists = config.state_db.exists()
        folder = config.state_db.parent.is_dir()
    except PermissionError:
        exists = folder = None
    if not exists:
        # A folder that is missing is no controller yet (issue 21 item 10), one we cannot enter is privacy.
        if exists is None or (folder and not os.access(config.state_db.parent, os.X_OK)):
            raise ConfigError(
                f"{config.state_db}: not readable by you (permission denied on its folder);"
                " the controller's admin can give a group access with file_group"
            )
        raise ConfigError(
            f"{config.state_db}: no controller state yet; start `teiresias controller run"
            f" --config {config.path or 'FILE'}` first"
        )
    try:
        return StateView(config.state_db)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(
            f"{config.state_db}: cannot read the controller state ({exc}); the controller's"
            " admin can give a group access with file_group"
        ) from None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_option
@click.option("-u", "--user", "users", multiple=True, help="Only this user's jobs (repeatable).")
@click.option("-j", "--jobs", "job_ids", multiple=True, help="Only these job ids (repeatable or comma-separated).")
@click.option("-a", "--all", "show_all", is_flag=True, help="Include finished jobs.")
@click.option("--no-slurm", is_flag=True, help="Read the state DB only; do not ask Slurm for live states.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
def queue(
    config_path: str | None,
    users: tuple[str, ...],
    job_ids: tuple[str, ...],
    show_all: bool,
    no_slurm: bool,
    as_json: bool,
) -> None:
    """List managed jobs: queue (Q1..QK), attained GPU-time, Gittins index,
    state, placement, preemptions, measured GPU use (GPU_UTIL, GPU_MEM: n/a
    without NVML), why pending.

    Reads the controller's state DB (and Slurm for live states when it answers).

    \b
    Examples:
      teiresias queue
      teiresias queue --json -u alice
      teiresias queue -j 42,43 --config etc/teiresias.yaml
    """
    config = load_config(config_path)
    wanted = parse_job_ids(job_ids)
    live = ask_slurm(config, no_slurm)
    with open_state(config) as store:
        # Named jobs are looked up among finished ones too (squeue -j shows a job that just ended).
        records = list(store.jobs(active_only=not show_all, also=wanted).values())
        raw_themis, raw_gandiva = store.get_meta(THEMIS_KEY), store.get_meta(GANDIVA_KEY)
    themis, gandiva, app_for = None, None, None
    if raw_themis:
        from slurm_plugin.controller import leases

        themis = leases.load(raw_themis)
    if raw_gandiva:
        from slurm_plugin.controller import slicing

        gandiva = slicing.load(raw_gandiva)
    if config.policy.apps or any(r.files.app for r in records):  # else every job's explicit app is ""
        from slurm_plugin.controller import leases

        app_for = lambda r: leases.record_app(config, r)  # noqa: E731
    slurm = live.jobs("teiresias queue", "showing the state DB only")
    visible = live.visible("teiresias queue")
    records = [r for r in records if visible(r)]
    if wanted:
        unknown = sorted(wanted - {r.job_id for r in records})
        if unknown:
            # Same answer for a job that does not exist and one the user may not see: no leak.
            raise ConfigError(
                f"--jobs: {','.join(map(str, unknown))}: no such managed job (or not visible to"
                " you); `teiresias queue --all` lists the ones you can see"
            )
    records = [r for r in records if (not users or r.user in users) and (not wanted or r.job_id in wanted)]
    from slurm_plugin.controller.view import build_rows, format_table

    rows = build_rows(records, time.time(), slurm, themis, app_for, gandiva)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=None))
    else:
        click.echo(format_table(rows), nl=False)
