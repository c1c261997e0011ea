"""Choose a Slurm backend by name: ``cli`` (default), ``restd``, ``pyslurm``
or ``auto`` (pyslurm when it imports and matches the site's Slurm, else cli)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from slurm_plugin.backends.base import SlurmBackend
from slurm_plugin.backends.cli import CliBackend
from teiresias.errors import ConfigError, SlurmError

log = logging.getLogger("teiresias.slurm")

BACKENDS = ("auto", "cli", "restd", "pyslurm")


def select_backend(
    name_or_auto: str = "auto",
    env: Mapping[str, str] | None = None,
    restd_socket: str | None = None,
    timeout: float = 30.0,
    poll: str = "json",
) -> SlurmBackend:
    """The backend called ``name_or_auto``. ``env`` is the environment of
    Slurm commands (SLURM_CONF); ``restd_socket`` (or env SLURMRESTD_SOCKET)
    the slurmrestd unix socket for ``restd``; ``poll`` the CLI backend's way
    of reading jobs (``json``: squeue --json, ``scontrol``: faster)."""
    name = (name_or_auto or "auto").strip().lower()
    env = dict(os.environ if env is None else env)
    if name == "cli":
        return CliBackend(env=env, timeout=timeout, poll=poll)
    if name == "restd":
        from slurm_plugin.backends.restd import RestdBackend

        sock = restd_socket or env.get("SLURMRESTD_SOCKET")
        if not sock:
            raise ConfigError(
                "backend restd needs the slurmrestd unix socket: set slurmrestd_socket "
                "or SLURMRESTD_SOCKET (e.g. `teiresias cluster up --restd`)"
            )
        return RestdBackend(sock, timeout=timeout)
    if name in ("pyslurm", "auto"):
        from slurm_plugin.backends.pyslurm_backend import PyslurmBackend, pyslurm_usable, site_slurm_version

        ok, why = pyslurm_usable(site_slurm_version(env))
        if ok:
            return PyslurmBackend(env)
        if name == "pyslurm":
            raise SlurmError(why)
        log.info("%s; using the JSON CLI backend", why)
        return CliBackend(env=env, timeout=timeout, poll=poll)
    raise ConfigError(f"unknown Slurm backend {name_or_auto!r}: choose one of {', '.join(BACKENDS)}")
