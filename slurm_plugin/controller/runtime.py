"""Wiring shared by `controller run`, `queue` and `demo`: config -> backend, store, audit, Controller."""

from __future__ import annotations

import logging
import os
import threading

from slurm_plugin.backends.base import SlurmBackend, SlurmNode
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import channel
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.files import FileModes
from slurm_plugin.controller.lock import ClusterLock
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.startup import SlurmSite, check_against_slurm, check_rights, read_site, slurm_env
from slurm_plugin.controller.state import StateStore

log = logging.getLogger("teiresias.controller")


def make_backend(config: ControllerConfig) -> SlurmBackend:
    """The backend the config names (``auto``: pyslurm when it matches the site's Slurm, else the CLI)."""
    from slurm_plugin.backends.select import select_backend

    env = slurm_env(config)
    socket = str(config.slurmrestd_socket) if config.slurmrestd_socket is not None else None
    return select_backend(config.backend, env=env, restd_socket=socket, poll=config.slurm_poll)


def make_controller(
    config: ControllerConfig,
    *,
    dry_run: bool = False,
    backend: SlurmBackend | None = None,
    standby: threading.Event | None = None,
) -> Controller:
    """``standby``: the stop event of a ``--standby`` controller, which waits for the
    cluster lock (as for the state DB's) instead of exiting 2."""
    modes = FileModes(config.file_group)
    store = StateStore(config.state_db, readonly_copy=dry_run, modes=modes)
    audit = AuditLog(None if dry_run else config.audit_log, modes)
    ctl = Controller(config, backend or make_backend(config), store, audit, dry_run=dry_run)
    channel.use(channel.Channel(config.spool_dir))

    def first_contact(nodes: list[SlurmNode]) -> list[str]:
        # Before any record is touched: a wrong partition once closed every record as VANISHED.
        check_against_slurm(config, nodes)
        site = read_site(slurm_env(config))
        cluster = site.cluster_name
        if not dry_run:
            check_rights(site, slurm_env(config))
        if config.spool_dir is not None and not dry_run:
            channel.prepare(config.spool_dir, cluster)
        elif config.spool_dir is None and os.geteuid() != 0:
            log.warning(
                "spool_dir is not set and the controller is not root: the checkpoint Acks and records that"
                " jobs write in their own (private) directories cannot be read; set spool_dir (docs/admin.md)"
            )
        channel.use(channel.Channel(config.spool_dir, cluster))
        notes = [] if dry_run else take_cluster_lock(ctl, site, config, standby)
        return notes + store.use_cluster(cluster)

    ctl.on_first_contact = first_contact
    return ctl


def take_cluster_lock(
    ctl: Controller, site: SlurmSite, config: ControllerConfig, standby: threading.Event | None
) -> list[str]:
    """One controller per Slurm cluster (lock.ClusterLock): LockHeld (exit 2) when another
    holds it, a standby waits; a note when it cannot be taken from this host."""
    lock = ClusterLock(site.state_save_location, site.cluster_name, config.state_db)
    why = lock.usable() if site.state_save_location else "slurmctld does not say its StateSaveLocation"
    if why is not None:
        return [
            f"cluster lock not taken ({why}): a second controller on another state DB would not"
            " be stopped; run the controllers of one cluster on slurmctld's host (docs/controller.md)"
        ]
    if standby is not None and not lock.try_acquire():
        log.info("standby: %s holds Slurm cluster %r; taking over when it ends", lock.holder(), site.cluster_name)
    lock.acquire(standby)
    ctl.cluster_lock = lock
    return []
