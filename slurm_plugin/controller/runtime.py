"""Wiring shared by `controller run`, `queue` and `demo`: config -> backend, store, audit, Controller."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from slurm_plugin.backends.base import SlurmBackend
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.state import StateStore
from teiresias.errors import ConfigError


def make_backend(config: ControllerConfig) -> SlurmBackend:
    """The backend the config names (``auto``: the best one that works here)."""
    if config.slurm_conf is not None:
        os.environ["SLURM_CONF"] = str(config.slurm_conf)
    import slurm_plugin.backends as backends
    from slurm_plugin.backends import cli as cli_backend

    select: Any = getattr(backends, "select_backend", None) or getattr(cli_backend, "select_backend", None)
    if select is not None and config.backend != "cli":
        return select(config.backend)
    if config.backend not in ("auto", "cli"):
        raise ConfigError(f"backend {config.backend!r} is not available here; use backend: cli")
    return cli_backend.CliBackend(slurm_conf=config.slurm_conf)


def make_controller(config: ControllerConfig, *, dry_run: bool = False,
                    backend: SlurmBackend | None = None) -> Controller:
    store = StateStore(config.state_db, readonly_copy=dry_run)
    audit = AuditLog(None if dry_run else config.audit_log)
    return Controller(config, backend or make_backend(config), store, audit, dry_run=dry_run)


def setup_logging(verbose: bool = False) -> None:
    """One line per event on stderr, job id first (configured by the CLI, never at import)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s teiresias %(levelname)s %(message)s",
                                           datefmt="%H:%M:%S"))
    root = logging.getLogger("teiresias")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
