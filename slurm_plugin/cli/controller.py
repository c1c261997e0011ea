"""`teiresias controller run`: the live controller daemon (docs/controller.md)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from typing import Any

import click

from slurm_plugin.cli.options import config_option
from slurm_plugin.config import ControllerConfig, load_config
from slurm_plugin.controller.files import FileModes
from slurm_plugin.controller.lock import ControllerLock
from slurm_plugin.controller.logs import crashed, set_level, setup_logging
from slurm_plugin.controller.loop import Controller, RoundResult
from slurm_plugin.controller.reload import reload
from slurm_plugin.controller.runtime import make_controller
from slurm_plugin.controller.startup import unreachable_line
from teiresias.errors import ConfigError, SlurmUnreachable, TeiresiasError

log = logging.getLogger("teiresias.controller")

EXIT_UNREACHABLE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def controller() -> None:
    """The live controller: schedules the managed partitions' jobs in Slurm.

    \b
    Example:
      teiresias controller run --config etc/teiresias.yaml
    """


@controller.command("run")
@config_option
@click.option("-n", "--dry-run", is_flag=True, help="Decide and print, but change nothing in Slurm or the state.")
@click.option("-1", "--once", is_flag=True, help="Run one round and exit.")
@click.option(
    "-j", "--json", "as_json", is_flag=True, help="Print each round's plan and actions as JSON (one object a line)."
)
@click.option(
    "-s",
    "--standby",
    is_flag=True,
    help="Wait while another controller runs on this state DB; take over when it stops or dies.",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def run(config_path: str | None, dry_run: bool, once: bool, as_json: bool, standby: bool, verbose: bool) -> None:
    """Run the controller: poll Slurm, decide with the policy, enact.

    Each round: snapshot Slurm -> reconcile with the state DB -> policy ->
    plan -> enact (hold/release with a node list, two-phase preemption).
    Slurm unreachable: one log line, then retries with back-off. One
    controller per state DB: a second one exits 2 naming the first one's pid,
    unless --standby, which waits and takes over within a second of the
    active one's end (even kill -9), finishing its journal first. SIGHUP
    reloads the configuration file after the current round; SIGTERM stops
    after it. Exit codes: 0 ok, 1 a crash (one line naming the file with its
    traceback), 2 bad input (config, partitions or cells unknown to Slurm,
    missing Slurm rights, lock held), 3 Slurm unreachable with --once.

    \b
    Examples:
      teiresias controller run          # the site's /etc/teiresias/teiresias.yaml
      teiresias controller run --config etc/teiresias.yaml --standby
      teiresias controller run --config etc/teiresias.yaml --once --json
      teiresias controller run -c etc/teiresias.yaml --dry-run --once
    """
    setup_logging("debug" if verbose else "info")
    config = load_config(config_path)
    # --once prints its round on stdout: its info lines would say the same a second time.
    set_level("debug" if verbose else ("warning" if once and config.log_level == "info" else config.log_level))
    if standby and dry_run:
        raise ConfigError("--standby and --dry-run exclude each other: a dry run changes nothing and needs no lock")
    stop = threading.Event()
    if not once or standby:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    # SIGHUP (systemctl reload): the configuration again after the current round; it
    # never ends the controller (its default action would, silently, with a "clean" exit).
    hup = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    # A dry run writes nothing (its store is an in-memory copy): it may run beside the controller.
    lock = None if dry_run else ControllerLock(config.state_db, FileModes(config.file_group))
    try:
        if lock is not None:
            if standby:
                if not lock.try_acquire():
                    log.info("standby: controller pid %s holds %s; taking over when it ends", lock.holder(), lock.path)
                    # Checked often: a flock costs nothing, and takeover within one poll interval is promised.
                    if not lock.wait(stop, min(0.5, config.poll_interval)):
                        return
                    log.info("standby: the lock is ours; taking over (interrupted actions first)")
            else:
                lock.acquire()
        # Built only now: a standby must read the state as the previous controller left it.
        _run(config, dry_run, once, as_json, stop, hup, verbose, standby)
    except (TeiresiasError, KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - a crash: one line, its traceback in a file (docs/admin.md "Logs")
        crashed(exc, config.audit_log.parent)
        raise SystemExit(1) from None
    finally:
        if lock is not None:
            lock.release()


def _run(
    config: ControllerConfig,
    dry_run: bool,
    once: bool,
    as_json: bool,
    stop: threading.Event,
    hup: threading.Event,
    verbose: bool,
    standby: bool = False,
) -> None:
    # A standby waits for the Slurm cluster's lock too (lock.ClusterLock), taken at the first round.
    ctl = make_controller(config, dry_run=dry_run, standby=stop if standby else None)

    def emit(result: RoundResult) -> None:
        log.debug(
            "round %d: %d job(s), %d action(s), %.3f s",
            result.round,
            result.jobs,
            len(result.actions),
            result.timings.get("total_s", 0.0),
        )
        if hup.is_set():
            hup.clear()
            reload(ctl, config.path, verbose)
        # The daemon's decisions are its log lines (one per event); stdout carries only
        # what was asked for: --json's objects, or --once's round.
        if as_json:
            click.echo(json.dumps(result.to_json()))
        elif once:
            for a in result.actions:
                click.echo(
                    f"round {result.round}: job {a.job} {a.action}"
                    f"{'' if a.ok else ' (dry run)' if a.ok is None else ' FAILED'}: {a.reason}"
                )
            if once and not result.actions:
                click.echo(f"round {result.round}: {result.jobs} job(s), nothing to do")

    if once:
        try:
            emit(ctl.round())
        except SlurmUnreachable as exc:
            click.echo(f"teiresias: error: {unreachable_line(exc)}", err=True)
            raise SystemExit(EXIT_UNREACHABLE) from None
        finally:
            ctl.store.close()
            ctl.audit.close()
            if ctl.cluster_lock is not None:
                ctl.cluster_lock.release()
        return

    server = None
    if config.metrics is not None:
        server = _serve_metrics(ctl, config)
    log.info(
        "controller started: partitions %s, policy %s, poll every %gs, state %s%s",
        ",".join(config.partitions),
        config.policy.name,
        config.poll_interval,
        config.state_db,
        " (dry run)" if dry_run else "",
    )
    try:
        ctl.run(stop, emit)
    finally:
        if server is not None:
            server.shutdown()
        ctl.store.close()
        ctl.audit.close()
        if ctl.cluster_lock is not None:
            ctl.cluster_lock.release()
        log.info("controller stopped")


def _serve_metrics(ctl: Controller, config: ControllerConfig) -> Any:
    """/metrics on the configured address (not with --once: nobody could scrape one round)."""
    from slurm_plugin.controller.metrics import ControllerMetrics, serve

    assert config.metrics is not None
    ctl.metrics = ControllerMetrics(config.policy.queues)
    addr, port = config.metrics.address, config.metrics.port
    try:
        server = serve(ctl.metrics, addr, port)
    except OSError as exc:
        ctl.store.close()
        ctl.audit.close()
        raise ConfigError(
            f"{config.path or 'config'}: metrics: cannot listen on {addr}:{port}"
            f" ({exc.strerror or exc}); choose another metrics.port or address"
        ) from None
    log.info("metrics served on http://%s:%d/metrics", addr, port)
    return server
