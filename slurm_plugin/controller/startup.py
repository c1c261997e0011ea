"""What the controller checks against Slurm before its first decision, and the
site facts it reads from ``scontrol show config``.

A config that names a partition or a cells node Slurm does not have must stop
the controller (exit 2), not run: a wrong partition once closed every record
as VANISHED, and a cells file naming a missing node left real nodes
unscheduled. The checks are pure (nodes in, ConfigError out); reading Slurm
is the caller's.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.config import ControllerConfig
from teiresias.errors import ConfigError, SlurmError, SlurmUnreachable


@dataclass(frozen=True)
class SlurmSite:
    """``scontrol show config`` facts: ClusterName keys the state's records,
    PrivateData decides what ``teiresias queue`` may show a user."""

    cluster_name: str
    private_data: frozenset[str]
    slurm_user: str
    state_save_location: str = ""  # slurmctld's state folder: where the cluster lock lives (lock.py)

    @property
    def private_jobs(self) -> bool:
        return "jobs" in self.private_data or "all" in self.private_data


def parse_show_config(text: str) -> SlurmSite:
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip()
    private = kv.get("PrivateData", "none")
    flags = (
        frozenset()
        if private.lower() in ("none", "(null)", "")
        else frozenset(f.strip().lower() for f in private.split(",") if f.strip())
    )
    return SlurmSite(
        kv.get("ClusterName", ""), flags, kv.get("SlurmUser", "").split("(")[0], kv.get("StateSaveLocation", "")
    )


def slurm_env(config: ControllerConfig) -> dict[str, str]:
    """This process's environment with the config's slurm.conf as SLURM_CONF."""
    env = dict(os.environ)
    if config.slurm_conf is not None:
        env["SLURM_CONF"] = str(config.slurm_conf)
    return env


def read_site(env: Mapping[str, str] | None = None, timeout: float = 30.0) -> SlurmSite:
    """``scontrol show config`` with ``env`` (SLURM_CONF); SlurmUnreachable when slurmctld does not answer."""
    try:
        r = subprocess.run(
            ["scontrol", "show", "config"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ if env is None else env),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SlurmUnreachable(
            f"scontrol show config did not answer within {timeout:.0f}s; is slurmctld up and SLURM_CONF right?"
        ) from None
    except FileNotFoundError:
        raise SlurmError("scontrol not found: install slurm-client") from None
    if r.returncode != 0 or "ClusterName" not in r.stdout:
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise SlurmUnreachable(f"scontrol show config failed ({last[0]}); is slurmctld up and SLURM_CONF right?")
    return parse_show_config(r.stdout)


_WRAPPED = re.compile(r"slurmctld does not answer \((?P<words>.*)\); is the cluster up and SLURM_CONF right\?")


def unreachable_line(exc: Exception) -> str:
    """One line for SlurmUnreachable: Slurm's words once, the hint once (the
    backend's message already carries a hint; it is not wrapped in a second)."""
    text = str(exc)
    m = _WRAPPED.fullmatch(text)
    return f"slurmctld unreachable ({m.group('words') if m else text}); is Slurm up and SLURM_CONF right?"


def check_against_slurm(config: ControllerConfig, nodes: Iterable[SlurmNode]) -> None:
    """Partitions and cells nodes of ``config`` must exist in Slurm; every node
    of a managed partition must be in some cell. One ConfigError line otherwise."""
    from slurm_plugin.controller.reconcile import build_cluster

    nodes = list(nodes)
    where = str(config.path) if config.path else "<config>"
    known = sorted({p for n in nodes for p in n.partitions})
    unknown = [p for p in config.partitions if p not in known]
    if unknown:
        raise ConfigError(
            f"{where}: partitions: {', '.join(unknown)} not in Slurm (its partitions with nodes:"
            f" {', '.join(known) or 'none'}); fix partitions (and job_submit.lua's MANAGED)"
        )
    if config.cells is None:
        return
    from teiresias.cells import config as cells_config

    cluster = build_cluster(nodes, config)
    # With the cluster, load() refuses node names Slurm lacks and GPU counts that differ.
    cells = cells_config.load(config.cells, cluster)
    covered = set(cells.node_names)
    left = [n.name for n in cluster.nodes if n.name not in covered]
    if left:
        raise ConfigError(
            f"{config.cells}: physical_cells: node(s) {', '.join(left)} of the managed partitions"
            " are in no cell and would never be scheduled; add them to physical_cells"
        )


def admin_level(user: str, env: Mapping[str, str], timeout: float = 30.0) -> str | None:
    """``AdminLevel`` of ``user`` in Slurm's accounting (``None``, ``Operator``,
    ``Administrator``); None when sacctmgr cannot tell (no slurmdbd, not installed)."""
    try:
        r = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    lines = r.stdout.split()
    return lines[0] if lines else "None"


def check_rights(site: SlurmSite, env: Mapping[str, str], uid: int | None = None) -> None:
    """The controller's user may hold, requeue and mark other users' jobs: root,
    SlurmUser or AdminLevel=Administrator (an Operator may not write AdminComment,
    where the controller marks its holds; docs/admin.md step 3). ConfigError naming
    the fix otherwise."""
    import pwd

    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return
    try:
        me = pwd.getpwuid(uid).pw_name
    except KeyError:
        me = str(uid)
    if me == site.slurm_user:
        return
    level = admin_level(me, env)
    if level == "Administrator":
        return
    fix = f"sacctmgr -i modify user {me} set adminlevel=Administrator"
    if level is None:
        raise ConfigError(
            f"user {me} has no Slurm admin rights that sacctmgr can show (no slurmdbd?): the controller must"
            f" hold, requeue and mark other users' jobs; run it as SlurmUser ({site.slurm_user or 'see slurm.conf'})"
            f" or give {me} AdminLevel=Administrator ({fix}; docs/admin.md step 3)"
        )
    raise ConfigError(
        f"user {me} has Slurm AdminLevel={level}; the controller needs Administrator (an Operator may not"
        f" write AdminComment, where it marks its holds): {fix} (docs/admin.md step 3)"
    )
