"""``teiresias profile``: show what the communication profiler learnt about a job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from profiler.aggregate import Profile, aggregate_dir
from profiler.store import ProfileStore
from teiresias.config import profile_store_root
from teiresias.errors import TeiresiasError
from teiresias.jobfiles import DEFAULT_BASE, ENV_BASE, ENV_PROFILE_STORE, profile_dir

ENV_STORE = ENV_PROFILE_STORE
ENV_JOB_BASE = ENV_BASE
DEFAULT_JOB_BASE = DEFAULT_BASE


class NoProfile(TeiresiasError):
    """No profile could be found for the job asked about."""


def _from_dir(d: Path) -> Profile:
    """A job directory (with profile/) or a profile directory itself."""
    sub = profile_dir(d)
    return aggregate_dir(sub if sub.is_dir() else d)


def store_root(store: str | None, config_path: str | None) -> Path | None:
    """--store, else $TEIRESIAS_PROFILE_STORE, else the site config's profile
    store (``--config``, $TEIRESIAS_CONFIG, /etc/teiresias/teiresias.yaml)."""
    try:
        return profile_store_root(os.environ, store, config_path)
    except TeiresiasError:
        if config_path:
            raise
        return None  # no controller config here: look in job directories only


def find_profile(job_id: str, jobdir: str | None, store: Path | None, job_base: str) -> tuple[Profile, str]:
    """(profile, where it came from): --dir, then the store, then <job base>/<cluster>/<id>
    (or <job base>/<id>). A spool's control folder holds the profile of a site's job: the
    controller aggregates it into the store."""
    if jobdir:
        d = Path(os.path.expanduser(jobdir))
        if not d.is_dir():
            raise NoProfile(f"--dir {d}: no such directory; give the job's directory (with profile/ inside)")
        return _from_dir(d), str(d)
    if store is not None:
        stored = ProfileStore(store).for_job(job_id)
        if stored is not None:
            return stored, f"store {store}"
    base = Path(os.path.expanduser(job_base))
    # <base>/<cluster>/<id> (tsbatch's job directories), or <base>/<id> (older ones)
    for d in [*sorted(base.glob(f"*/{job_id}")), base / job_id]:
        if profile_dir(d).is_dir():
            return _from_dir(d), str(d)
    d = base / job_id
    raise NoProfile(
        f"no profile for job {job_id}: not in the profile store ({store or 'none configured'}) "
        f"and no {profile_dir(d)}; use --dir JOBDIR or --store DIR"
    )


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.1f}%"


def _mib(x: float) -> str:
    return f"{x / 2**20:.2f} MiB"


def render(job_id: str, p: Profile, where: str) -> str:
    lines = [f"job {job_id}  ({where})"]
    if not p.valid:
        lines.append(f"  no profile: {p.reason}")
    # Placement uses the skew of the collectives on the wire (DDP buckets at
    # the job's cap, docs/profiler.md "Which skew"); the largest-tensor ratio
    # is shown beside it because it is what Tiresias' Table 6 lists.
    lines += [
        f"  skew (placement)  {_pct(p.skew)}" + (f"  (bucket skew, from {p.skew_source})" if p.skew_source else ""),
    ]
    if p.layer != "none":
        lines += [
            f"  layer             {p.layer}, {p.ranks} ranks",
            f"  bucket skew       {_pct(p.traffic_skew)} from traffic"
            + ("" if p.traffic_skew_valid else "  (not trusted)")
            + (f", bucketed, largest tensor >= {_pct(p.skew_lower_bound)}" if p.bucketed else ""),
            f"  iteration period  {p.period_s * 1e3:.1f} ms over {p.iterations} iterations"
            if p.period_s
            else "  iteration period  unknown",
            f"  collectives/iter  {p.collectives_per_iteration}",
            f"  bytes/iter/rank   {_mib(p.bytes_per_iteration)}  (model ~{_mib(p.model_bytes)})",
            f"  intensity         {p.intensity_bps / 2**20:.1f} MiB/s per rank"
            if p.intensity_bps
            else "  intensity         unknown",
        ]
    if p.model_bucket_skew is not None:
        agree = "" if p.agrees is None else ("  (agrees with traffic)" if p.agrees else "  (DISAGREES with traffic)")
        lines.append(
            f"  bucket skew       {_pct(p.model_bucket_skew)} from the model, {p.model_buckets} DDP buckets{agree}"
        )
    if p.model_skew is not None:
        lines.append(f"  tensor skew       {_pct(p.model_skew)} largest-tensor ratio over {p.model_tensors} tensors")
    lines += [f"  note: {n}" for n in p.notes]
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def profile() -> None:
    """Communication profiles of jobs (skew, iteration period, bytes).

    \b
    Examples:
      teiresias profile show 1234
      teiresias profile show 1234 --dir ~/.teiresias/jobs/1234 --json
    """


@profile.command("show")
@click.argument("job_id")
@click.option(
    "-d",
    "--dir",
    "jobdir",
    default=None,
    metavar="JOBDIR",
    help="Aggregate the records in this job directory (or its profile/ folder).",
)
@click.option(
    "-s",
    "--store",
    default=None,
    metavar="DIR",
    help=f"Profile store (default: ${ENV_STORE}, else the controller config's profile_store).",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The site's config, naming the profile store (default: $TEIRESIAS_CONFIG, else /etc/teiresias/teiresias.yaml).",
)
@click.option(
    "-b",
    "--job-base",
    default=lambda: os.environ.get(ENV_JOB_BASE, DEFAULT_JOB_BASE),
    show_default=f"${ENV_JOB_BASE} or {DEFAULT_JOB_BASE}",
    help="Base of job directories (tsbatch --checkpoint-dir).",
)
@click.option("-j", "--json", "as_json", is_flag=True, help="Print the profile as JSON.")
def show(
    job_id: str, jobdir: str | None, store: str | None, config_path: str | None, job_base: str, as_json: bool
) -> None:
    """Print the profile of JOB_ID: skew, period, bytes per iteration.

    Exit 0 when a profile was found (even one that says "no profile" because
    the run could not be profiled: see `valid` and `reason`), 2 when none exists.

    \b
    Example:
      teiresias profile show 1234 --json
    """
    root = None if jobdir else store_root(store, config_path)
    p, where = find_profile(job_id, jobdir, root, job_base)
    if as_json:
        click.echo(json.dumps({"job_id": job_id, "source": where, **p.to_json()}, indent=1))
    else:
        click.echo(render(job_id, p, where))
