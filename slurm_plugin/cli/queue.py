"""`teiresias queue`: the managed jobs as teiresias sees them (squeue-like)."""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import time
from collections.abc import Callable

import click

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.cli.options import config_option
from slurm_plugin.config import ControllerConfig, load_config
from slurm_plugin.controller import leases, slicing
from slurm_plugin.controller.startup import read_site, slurm_env
from slurm_plugin.controller.state import JobRecord, StateStore
from slurm_plugin.controller.view import build_rows, format_table
from teiresias.errors import ConfigError, SlurmError


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


def slurm_jobs(config: ControllerConfig, prog: str, fallback: str) -> dict[int, SlurmJob] | None:
    """The jobs Slurm knows now by id; None, said in one line on stderr with
    what ``prog`` does instead (``fallback``), when Slurm does not answer."""
    try:
        from slurm_plugin.controller.runtime import make_backend

        return {j.job_id: j for j in make_backend(config).jobs()}
    except (SlurmError, OSError) as exc:
        click.echo(f"{prog}: Slurm did not answer ({exc}); {fallback}", err=True)
        return None


def _open_state(config: ControllerConfig) -> StateStore:
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
        return StateStore(config.state_db, readonly_copy=True)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(
            f"{config.state_db}: cannot read the controller state ({exc}); the controller's"
            " admin can give a group access with file_group"
        ) from None


def _visible(config: ControllerConfig, slurm: dict[int, SlurmJob] | None) -> Callable[[JobRecord], bool]:
    """What ``squeue`` would show the caller under the site's PrivateData: with
    ``jobs`` in it, a user sees their own jobs and those slurmctld still lists
    for them (it hides the others' from ``squeue --json`` too, and shows all of
    them to operators and admins); without it, every job. root sees all."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        return lambda r: True
    try:
        site = read_site(slurm_env(config))
    except SlurmError as exc:
        click.echo(f"teiresias queue: cannot read Slurm's PrivateData ({exc}); showing your own jobs only", err=True)
        return lambda r: r.user == me
    if me == site.slurm_user or not site.private_jobs:
        return lambda r: True
    listed = set(slurm or ())  # None: Slurm not asked (--no-slurm) or down: own jobs only
    return lambda r: r.user == me or r.job_id in listed


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
    store = _open_state(config)
    try:
        # Named jobs are looked up among finished ones too (squeue -j shows a job that just ended).
        records = list(store.jobs(active_only=not (show_all or wanted)).values())
        themis = leases.load(store.get_meta(leases.META_KEY))
        gandiva = slicing.load(store.get_meta(slicing.META_KEY))
    finally:
        store.close()
    slurm = None if no_slurm else slurm_jobs(config, "teiresias queue", "showing the state DB only")
    records = [r for r in records if _visible(config, slurm)(r)]
    if wanted:
        unknown = sorted(wanted - {r.job_id for r in records})
        if unknown:
            # Same answer for a job that does not exist and one the user may not see: no leak.
            raise ConfigError(
                f"--jobs: {','.join(map(str, unknown))}: no such managed job (or not visible to"
                " you); `teiresias queue --all` lists the ones you can see"
            )
    records = [r for r in records if (not users or r.user in users) and (not wanted or r.job_id in wanted)]
    rows = build_rows(records, time.time(), slurm, themis, lambda r: leases.record_app(config, r), gandiva)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=None))
    else:
        click.echo(format_table(rows), nl=False)
