"""`teiresias explain JOBID`: why a managed job waits, was preempted, or runs where it runs."""

from __future__ import annotations

import json
import time

import click

from slurm_plugin.cli.options import config_option
from slurm_plugin.cli.queue import ask_slurm, open_state
from slurm_plugin.config import load_config
from slurm_plugin.controller.explain import META_KEY, explain, format_text
from teiresias.errors import ConfigError


def _job_id(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise ConfigError(f"JOBID: {text!r} is not a job id; give a positive number like `teiresias explain 42`")
    return int(text)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job", metavar="JOBID")
@config_option
@click.option("--no-slurm", is_flag=True, help="Read the state DB only; do not ask Slurm for the live state.")
@click.option("-j", "--json", "as_json", is_flag=True, help="Print one JSON object.")
def explain_cmd(job: str, config_path: str | None, no_slurm: bool, as_json: bool) -> None:
    """Why job JOBID is pending, preempted or placed where it is.

    From the controller's last plan (kept in its state DB each round): the
    job's queue and rank, its attained GPU-time and the queue thresholds it
    crossed and will cross next, the jobs ahead of it and the GPUs they hold,
    free and needed GPUs per node, its VC's quota, its lease, a start it is
    waiting for, and the next event expected to change that. You can explain
    the jobs `teiresias queue` shows you; others' jobs ahead of yours are
    counted, not named. Exit codes: 0 ok, 2 bad input or unknown job.

    \b
    Examples:
      teiresias explain 42
      teiresias explain 42 --json -c etc/teiresias.yaml
    """
    job_id = _job_id(job)
    config = load_config(config_path)
    live = ask_slurm(config, no_slurm)
    with open_state(config) as store:
        # The explanation reads the job and the active ones (ahead of it, running).
        records = store.jobs(also=(job_id,))
        raw = store.get_meta(META_KEY)
    slurm = live.jobs("teiresias explain", "explaining from the state DB only")
    visible = live.visible("teiresias explain")
    r = records.get(job_id)
    if r is None or not visible(r):
        # Same answer for a job that does not exist and one the caller may not see: no leak.
        raise ConfigError(
            f"JOBID: {job_id}: no such managed job (or not visible to you);"
            " `teiresias queue --all` lists the ones you can see"
        )
    try:
        summary = json.loads(raw) if raw else None
    except ValueError:
        summary = None
    now = time.time()
    sj = (slurm or {}).get(job_id)
    e = explain(job_id, records, summary, now, visible, sj.state if sj is not None else None)
    if as_json:
        click.echo(json.dumps(e.to_json()))
    else:
        click.echo(format_text(e, now), nl=False)
