"""SIGHUP: the configuration file read again between two rounds (docs/admin.md
"Reload (SIGHUP)", issue 21 item 4).

Reloaded: the knobs the controller consults each round (the policy's knobs,
placement, PACKLIMIT, poll interval, preemption times, topology, log level).
Not reloaded: what names a resource opened at the start, or state built for
one policy family (the policy's name: leases, time slices): a change there
takes a restart, is said so in the log line, and the running value stays.
A file that does not load is refused whole, with its one error line; the
controller never stops for a reload.
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from pathlib import Path

from slurm_plugin.config import ControllerConfig, load_config
from slurm_plugin.controller.logs import set_level
from slurm_plugin.controller.loop import Controller
from teiresias.errors import TeiresiasError

log = logging.getLogger("teiresias.controller")

RESTART_KEYS = (
    "partitions",
    "state_db",
    "audit_log",
    "profile_store",
    "backend",
    "slurm_poll",
    "slurm_conf",
    "slurmrestd_socket",
    "cells",
    "file_group",
    "metrics",
    "events_socket",
    "spool_dir",
)


def merge(running: ControllerConfig, new: ControllerConfig) -> tuple[ControllerConfig, list[str], list[str]]:
    """(the configuration to run with, the keys it changes, the keys that would take a restart)."""
    restart = [k for k in RESTART_KEYS if getattr(new, k) != getattr(running, k)]
    if new.policy.name != running.policy.name:
        restart.append("policy.name")
    merged = replace(
        new,
        policy=replace(new.policy, name=running.policy.name),
        **{k: getattr(running, k) for k in RESTART_KEYS},
    )
    changed = []
    for f in fields(merged):
        if f.name == "path" or getattr(merged, f.name) == getattr(running, f.name):
            continue
        if f.name == "policy":
            changed += [
                f"policy.{g.name}"
                for g in fields(merged.policy)
                if getattr(merged.policy, g.name) != getattr(running.policy, g.name)
            ]
        else:
            changed.append(f.name)
    return merged, changed, restart


def apply(ctl: Controller, config: ControllerConfig) -> None:
    """Every part that reads the configuration gets the new one; the policy is rebuilt
    at the next round (History.policy), PACKLIMIT refitted."""
    seed_changed = config.policy.gittins_samples != ctl.history.config.policy.gittins_samples
    for part in (ctl, ctl.history, ctl.preempter, ctl.starter, ctl.books):
        part.config = config
    h = ctl.history
    h._policy = None
    h.packlimit_fit = None
    h._runs_changed = True
    if seed_changed:
        from teiresias.policy.gittins import ServiceDistribution

        samples = config.policy.gittins_samples
        h._seed = ServiceDistribution.from_samples_file(samples) if samples is not None and h.uses_samples else None


def reload(ctl: Controller, path: Path | None, verbose: bool) -> bool:
    """Read ``path`` again and apply what may be; one log line either way. True when applied."""
    if path is None:
        log.warning("SIGHUP: no configuration file to reload (the controller was started without one)")
        return False
    try:
        new = load_config(path)
    except TeiresiasError as exc:
        log.error("SIGHUP: %s; the configuration in force stays", exc)
        return False
    merged, changed, restart = merge(ctl.config, new)
    if changed:
        apply(ctl, merged)
    if not verbose:
        set_level(merged.log_level)
    later = f"; {', '.join(restart)} changed too, which takes a restart (the running values stay)" if restart else ""
    log.info("configuration reloaded from %s: %s%s", path, ", ".join(changed) or "nothing changed", later)
    return True
