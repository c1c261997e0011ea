"""The controller's YAML configuration (``etc/teiresias.yaml``), validated on load.

It sits below slurm_plugin/, wrappers/ and profiler/ (docs/architecture.md):
the controller runs by it, and tsbatch and ``teiresias profile`` find the
profile store through it (``profile_store_root``), without importing the
controller. slurm_plugin/config.py re-exports it.

Every mistake a site can make in the file (unknown key, wrong type, queue
thresholds out of order, missing samples file) becomes one ``ConfigError``
line naming the file and the key, so ``teiresias controller run`` refuses to
start instead of scheduling with half a configuration.

Relative paths in the file are resolved against the file's own folder, so a
config can travel with its state directory.
"""

from __future__ import annotations

import grp
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, overload

from teiresias import yamlconf
from teiresias.domain.topology import Topology
from teiresias.errors import ConfigError
from teiresias.jobfiles import DEFAULT_CONFIG, ENV_CONFIG, ENV_PROFILE_STORE
from teiresias.policy.mlfq import QUEUE_ORDERS
from teiresias.policy.registry import PLACEMENT_NAMES, POLICY_NAMES

BACKENDS = ("auto", "cli", "restd", "pyslurm")
POLLS = ("json", "scontrol", "fields")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class PolicyConfig:
    # The default is not the paper's: docs/policies.md, "Defaults" (las is paper-faithful by name).
    name: str = "gittins"
    # K-1 thresholds in GPU-seconds between queues Q1..QK (Tiresias §3.2.3).
    queues: tuple[float, ...] = (3600.0,)
    # delta_J >= knob * t_J promotes a starving job to Q1; None disables promotion.
    promote_knob: float | None = None
    # Optional CSV (column 'duration') of past jobs' GPU-seconds seeding 2D-Gittins.
    gittins_samples: Path | None = None
    # Order of gittins' last queue: "fifo" (the paper) or "gittins" (index with Delta = infinity);
    # None: gittins' default, the index.
    last_queue: str | None = None
    # themis (docs/themis.md): GPU lease in seconds, the fairness knob f, and apps named by
    # the admin: (account, app) pairs, so every job of such an account belongs to that app.
    lease: float = 600.0
    fairness_knob: float = 0.8
    apps: tuple[tuple[str, str], ...] = ()
    # policy.queues: auto: thresholds fitted to the GPU-time samples (teiresias/policy/thresholds.py)
    # and refitted as finished jobs add samples; ``queues`` holds the paper's until there are samples.
    queues_auto: bool = False
    # sjf-bsbf / sjf-ffs: the interference and memory model (etc/sharing.yaml); None: the model's defaults.
    sharing: Path | None = None
    # gandiva (docs/gandiva.md): its knobs as (name, value) pairs, given to GandivaParams
    # (slice, max_height, packing, pack_util, migration, defrag_threshold, grow_shrink, idle_period).
    gandiva: tuple[tuple[str, float | bool], ...] = ()
    # gittins: seconds a preemption costs its job (checkpoint + restore; docs/policies.md); with
    # ``policy.preempt_cost: measured`` the median measured on this site's preemptions
    # (controller/history.py), ``preempt_cost`` (0, the paper's) until one is measured.
    preempt_cost: float = 0.0
    preempt_cost_measured: bool = False
    # las/gittins' order inside a queue (teiresias.policy.mlfq.QUEUE_ORDERS); None: the policy's
    # default (las: fifo, the paper's; gittins: lifo-resume).
    queue_order: str | None = None
    # gittins reads the TimeLimit Slurm holds for each job as a bound on its GPU-time.
    time_limits: bool = True


# policy.gandiva keys: True for switches, False for numbers (teiresias/policy/gandiva/params.py).
GANDIVA_KEYS = {
    "slice": False,
    "max_height": False,
    "packing": True,
    "pack_util": False,
    "migration": True,
    "defrag_threshold": False,
    "grow_shrink": True,
    "idle_period": False,
}


@dataclass(frozen=True)
class PreemptionConfig:
    # How long a signalled job may take to checkpoint and write its Ack.
    grace_seconds: float = 30.0
    # A released job that Slurm has not started after this long is held again.
    start_timeout_seconds: float = 30.0
    # Minimum run times (teiresias.policy.protect; docs/controller.md "Minimum run times"):
    # a job that checkpoints is not preempted in the first N s of a run (a start followed
    # by a preemption seconds later costs a checkpoint and a restore for nothing); a job
    # that cannot (plain sbatch: its preemption loses all its work since it started) is
    # never preempted once started (inf, "never" in YAML), measured on the testbed mix
    # with 30% plain jobs: 0.74-0.76x the average JCT of preempting them, no work lost
    # (docs/benchmarks.md "Jobs that cannot checkpoint").
    min_run_seconds: float = 30.0
    plain_min_run_seconds: float = math.inf


@dataclass(frozen=True)
class MetricsConfig:
    # Loopback by default: the metrics name no job or user, but the queue's size is still the site's business.
    address: str = "127.0.0.1"
    port: int = 9464


@dataclass(frozen=True)
class ControllerConfig:
    path: Path | None = None
    partitions: tuple[str, ...] = ("gpu",)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    placement: str = "consolidate"
    # PACKLIMIT of profile placement (Tiresias §3.3.2); None: the policy default.
    packlimit: float | None = None
    # Refit PACKLIMIT on measured runs (controller/packlimit.py); the above is the
    # default until there are packlimit_min_samples spread runs of both kinds.
    packlimit_learning: bool = True
    packlimit_min_samples: int = 8
    poll_interval: float = 3.0
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    state_db: Path = Path("/var/lib/teiresias/state.db")
    audit_log: Path = Path("/var/log/teiresias/audit.jsonl")
    # Communication profiles (profiler.store.ProfileStore); None: <state_db folder>/profiles.
    profile_store: Path | None = None
    backend: str = "auto"
    # How the CLI backend reads jobs: squeue -O with the fields the controller reads (fields,
    # ~10x faster than json, the same jobs: slurm_plugin/backends/fields.py), squeue --json,
    # or scontrol show job (2-2.5x faster than json).
    slurm_poll: str = "fields"
    slurm_conf: Path | None = None
    # slurmrestd unix socket for backend restd (else $SLURMRESTD_SOCKET).
    slurmrestd_socket: Path | None = None
    # switch name -> Slurm node names; nodes not listed share the default switch.
    topology: Topology = field(default_factory=Topology)
    # HiveD virtual clusters (teiresias/cells, docs/cells.md); None: no VCs.
    cells: Path | None = None
    # Group that may read the state DB and audit log (files 0640, folders 0750);
    # None: only the controller's user (0600 / 0700). docs/controller.md "Files".
    file_group: str | None = None
    # Prometheus /metrics (controller/metrics.py); None: not served.
    metrics: MetricsConfig | None = None
    # Unix datagram socket Slurm's EpilogSlurmctld pokes (controller/events.py);
    # None: polling only.
    events_socket: Path | None = None
    # The control channel's spool (docs/admin.md "The control channel"): jobs write
    # their Ack, records and profile to <spool_dir>/<ClusterName>/<job>.<key>/, which
    # the controller reads without root and without seeing users' homes. None: the
    # job's own directory (a controller that runs as root or as the jobs' user).
    spool_dir: Path | None = None
    # The controller's log level (debug, info, warning, error); -v makes it debug. SIGHUP reloads it.
    log_level: str = "info"

    def switch_of(self, node: str) -> str:
        return self.topology.switch_of(node)

    @property
    def profiles(self) -> Path:
        return self.profile_store or self.state_db.parent / "profiles"

    def manages(self, partition: str) -> bool:
        """Slurm reports a multi-partition submission as ``a,b``; any managed one counts."""
        return _manages(self.partitions, partition)


@lru_cache(maxsize=4096)
def _manages(partitions: tuple[str, ...], partition: str) -> bool:
    return any(p in partitions for p in partition.split(",") if p)


# key -> allowed keys beneath it (None: a leaf)
_SCHEMA: dict[str, Any] = {
    "partitions": None,
    "policy": {
        "name": None,
        "queues": None,
        "promote_knob": None,
        "gittins_samples": None,
        "last_queue": None,
        "queue_order": None,
        "time_limits": None,
        "lease": None,
        "fairness_knob": None,
        "apps": None,
        "sharing": None,
        "preempt_cost": None,
        "gandiva": dict.fromkeys(GANDIVA_KEYS),
    },
    "placement": None,
    "packlimit": None,
    "packlimit_learning": None,
    "packlimit_min_samples": None,
    "poll_interval": None,
    "preemption": {
        "grace_seconds": None,
        "start_timeout_seconds": None,
        "min_run_seconds": None,
        "plain_min_run_seconds": None,
    },
    "state_db": None,
    "audit_log": None,
    "profile_store": None,
    "backend": None,
    "slurm_poll": None,
    "slurm_conf": None,
    "slurmrestd_socket": None,
    "topology": {"switches": None},
    "cells": None,
    "file_group": None,
    "metrics": {"address": None, "port": None},
    "events": {"socket": None},
    "spool_dir": None,
    "log_level": None,
}


class _Reader:
    """Type checks that name the file and the dotted key in their one-line error."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {problem}")

    def check_keys(self, data: Mapping[str, Any], schema: Mapping[str, Any], prefix: str = "") -> None:
        for key, value in data.items():
            dotted = f"{prefix}{key}"
            if key not in schema:
                raise yamlconf.unknown_key(self.path, dotted, schema, prefix.rstrip("."))
            sub = schema[key]
            if sub is not None and value is not None:
                if not isinstance(value, Mapping):
                    raise self.fail(dotted, f"must be a mapping with keys {', '.join(sorted(sub))}")
                # topology too: 'topology: {switchs: ...}' would otherwise leave every node on one switch.
                self.check_keys(value, sub, dotted + ".")

    @overload
    def number(self, key: str, value: Any, *, positive: bool = ..., allow_none: Literal[False] = ...) -> float: ...

    @overload
    def number(self, key: str, value: Any, *, positive: bool = ..., allow_none: bool) -> float | None: ...

    def number(self, key: str, value: Any, *, positive: bool = True, allow_none: bool = False) -> float | None:
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise self.fail(key, f"must be a number, got {value!r}")
        if positive and value <= 0:
            raise self.fail(key, f"must be > 0, got {value!r}")
        if not positive and value < 0:
            raise self.fail(key, f"must be >= 0, got {value!r}")
        return float(value)

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def integer(self, key: str, value: Any, *, minimum: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be a whole number >= {minimum}, got {value!r}")
        return value

    def string(self, key: str, value: Any, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def strings(self, key: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, f"must be a non-empty list of names, got {value!r}")
        return tuple(value)


def _seconds_or_never(r: Any, key: str, section: Mapping[str, Any]) -> float:
    """A minimum run time: seconds >= 0, or ``never`` (infinity: never preempted once started)."""
    value = section.get(key.rsplit(".", 1)[1], "never")
    if value == "never":
        return math.inf
    if isinstance(value, str):
        raise r.fail(key, f"must be seconds >= 0 or never, got {value!r}")
    return float(r.number(key, value, positive=False))


def _resolve(base: Path, value: str) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (base / p)


def parse_config(data: Any, path: str = "<config>", base: Path | None = None) -> ControllerConfig:
    """Validate a loaded YAML document; ``base`` resolves relative paths."""
    r = _Reader(path)
    base = base or Path.cwd()
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: the file must hold a mapping of keys, got {type(data).__name__}")
    r.check_keys(data, _SCHEMA)
    d = ControllerConfig()
    kw: dict[str, Any] = {"path": Path(path) if path != "<config>" else None}

    if "partitions" in data:
        kw["partitions"] = r.strings("partitions", data["partitions"])

    pol = data.get("policy") or {}
    pd = PolicyConfig()
    # Checked here, not at the first round: a typo must stop the start, even with Slurm down.
    name = r.string("policy.name", pol.get("name", pd.name), POLICY_NAMES)
    queues = pol.get("queues", list(pd.queues))
    queues_auto = queues == "auto"
    if queues_auto:
        queues = list(pd.queues)
    if not isinstance(queues, list) or not queues:
        raise r.fail("policy.queues", f"must be a non-empty list of GPU-second thresholds or auto, got {queues!r}")
    qs = tuple(r.number(f"policy.queues[{i}]", q) for i, q in enumerate(queues))
    if any(b <= a for a, b in zip(qs, qs[1:])):
        raise r.fail("policy.queues", f"thresholds must be strictly increasing, got {list(queues)}")
    knob = r.number("policy.promote_knob", pol.get("promote_knob"), allow_none=True)
    samples = pol.get("gittins_samples")
    samples_path = None
    if samples is not None:
        samples_path = _resolve(base, r.string("policy.gittins_samples", samples))
        if not samples_path.is_file():
            raise r.fail("policy.gittins_samples", f"file {samples_path} does not exist")
    last_queue = None
    if pol.get("last_queue") is not None:
        last_queue = r.string("policy.last_queue", pol["last_queue"], ("fifo", "gittins"))
    if last_queue not in (None, "fifo") and name != "gittins":
        raise r.fail("policy.last_queue", f"{last_queue} orders gittins' last queue; set policy.name: gittins")
    queue_order = None
    if pol.get("queue_order") is not None:
        queue_order = r.string("policy.queue_order", pol["queue_order"], QUEUE_ORDERS)
        if name not in ("las", "gittins"):
            raise r.fail("policy.queue_order", f"orders las/gittins queues; policy {name} has none")
    time_limits = r.boolean("policy.time_limits", pol.get("time_limits", pd.time_limits))
    lease = r.number("policy.lease", pol.get("lease", pd.lease))
    fknob = r.number("policy.fairness_knob", pol.get("fairness_knob", pd.fairness_knob))
    if not 0.0 < fknob < 1.0:
        raise r.fail("policy.fairness_knob", f"must be in (0, 1), e.g. 0.8; got {fknob}")
    apps_raw = pol.get("apps") or {}
    if not isinstance(apps_raw, Mapping):
        raise r.fail("policy.apps", "must map each app name to a list of accounts, e.g. {search: [alice]}")
    apps: list[tuple[str, str]] = []
    owner: dict[str, str] = {}
    for app, accounts in apps_raw.items():
        app = r.string("policy.apps", app)
        for acct in r.strings(f"policy.apps.{app}", accounts):
            if acct in owner:
                raise r.fail(f"policy.apps.{app}", f"account {acct} is already in app {owner[acct]}")
            owner[acct] = app
            apps.append((acct, app))
    if queues_auto and name not in ("las", "gittins"):
        raise r.fail("policy.queues", f"auto fits las/gittins queue thresholds; policy {name} has no queues to fit")
    if name in ("sjf-bsbf", "sjf-ffs") and samples_path is None:
        # Live jobs have no known duration: their length is the expected residual GPU-time.
        raise r.fail(
            "policy.gittins_samples",
            f"policy {name} estimates job lengths from past jobs' GPU-time;"
            " give a CSV (column 'duration'), e.g. teiresias/data/yarn-gput1000.csv",
        )
    sharing_path = None
    if pol.get("sharing") is not None:
        sharing_path = _resolve(base, r.string("policy.sharing", pol["sharing"]))
        if not sharing_path.is_file():
            raise r.fail("policy.sharing", f"file {sharing_path} does not exist; see etc/sharing.yaml")
    gandiva: list[tuple[str, float | bool]] = []
    for key, value in (pol.get("gandiva") or {}).items():
        where = f"policy.gandiva.{key}"
        got = r.boolean(where, value) if GANDIVA_KEYS[key] else r.number(where, value, positive=False)
        gandiva.append((key, got))
    cost_raw = pol.get("preempt_cost", 0)
    cost_measured = cost_raw == "measured"
    if isinstance(cost_raw, str) and not cost_measured:
        raise r.fail("policy.preempt_cost", f"must be seconds >= 0 or measured, got {cost_raw!r}")
    cost = 0.0 if cost_measured else r.number("policy.preempt_cost", cost_raw, positive=False)
    if (cost_measured or cost) and name != "gittins":
        raise r.fail(
            "policy.preempt_cost",
            f"weighs preemptions in gittins' index; policy {name} has none: set policy.name: gittins or drop the key",
        )
    kw["policy"] = PolicyConfig(
        name,
        qs,
        knob,
        samples_path,
        last_queue,
        lease,
        fknob,
        tuple(apps),
        queues_auto=queues_auto,
        sharing=sharing_path,
        gandiva=tuple(gandiva),
        preempt_cost=cost,
        preempt_cost_measured=cost_measured,
        queue_order=queue_order,
        time_limits=time_limits,
    )

    if "placement" in data:
        kw["placement"] = r.string("placement", data["placement"], PLACEMENT_NAMES)
    if data.get("packlimit") is not None:
        kw["packlimit"] = r.number("packlimit", data["packlimit"], positive=False)
    if "packlimit_learning" in data:
        kw["packlimit_learning"] = r.boolean("packlimit_learning", data["packlimit_learning"])
    if "packlimit_min_samples" in data:
        kw["packlimit_min_samples"] = r.integer("packlimit_min_samples", data["packlimit_min_samples"])
    if "poll_interval" in data:
        kw["poll_interval"] = r.number("poll_interval", data["poll_interval"])
    pre = data.get("preemption") or {}
    pdd = PreemptionConfig()
    kw["preemption"] = PreemptionConfig(
        grace_seconds=r.number("preemption.grace_seconds", pre.get("grace_seconds", pdd.grace_seconds), positive=False),
        start_timeout_seconds=r.number(
            "preemption.start_timeout_seconds", pre.get("start_timeout_seconds", pdd.start_timeout_seconds)
        ),
        min_run_seconds=r.number(
            "preemption.min_run_seconds", pre.get("min_run_seconds", pdd.min_run_seconds), positive=False
        ),
        plain_min_run_seconds=_seconds_or_never(r, "preemption.plain_min_run_seconds", pre),
    )
    for key in ("state_db", "audit_log", "profile_store", "spool_dir"):
        if data.get(key) is not None:
            kw[key] = _resolve(base, r.string(key, data[key]))
    if "backend" in data:
        kw["backend"] = r.string("backend", data["backend"], BACKENDS)
    if "log_level" in data:
        kw["log_level"] = r.string("log_level", data["log_level"], LOG_LEVELS)
    if "slurm_poll" in data:
        kw["slurm_poll"] = r.string("slurm_poll", data["slurm_poll"], POLLS)
    if data.get("slurm_conf") is not None:
        kw["slurm_conf"] = _resolve(base, r.string("slurm_conf", data["slurm_conf"]))
        if not kw["slurm_conf"].is_file():
            # Slurm's commands would only say "unable to contact slurmctld", and only after their timeout.
            raise r.fail("slurm_conf", f"file {kw['slurm_conf']} does not exist; give the cluster's slurm.conf")

    if data.get("slurmrestd_socket") is not None:
        kw["slurmrestd_socket"] = _resolve(base, r.string("slurmrestd_socket", data["slurmrestd_socket"]))

    # The one topology description (teiresias/domain/topology.py): {switch: [nodes]}, or
    # cluster.yaml's list of {name, nodes}.
    kw["topology"], _ = yamlconf.switches(path, "topology.switches", (data.get("topology") or {}).get("switches") or {})

    if data.get("cells") is not None:
        cells_path = _resolve(base, r.string("cells", data["cells"]))
        if not cells_path.is_file():
            raise r.fail("cells", f"file {cells_path} does not exist; see etc/cells.example.yaml")
        kw["cells"] = cells_path
    if data.get("file_group") is not None:
        group = r.string("file_group", data["file_group"])
        try:
            grp.getgrnam(group)
        except KeyError:
            raise r.fail("file_group", f"no group named {group!r} on this host; create it or remove the key") from None
        kw["file_group"] = group
    if "metrics" in data:
        m = data["metrics"] or {}
        md = MetricsConfig()
        port = r.integer("metrics.port", m.get("port", md.port))
        if port > 65535:
            raise r.fail("metrics.port", f"must be a TCP port (1-65535), got {port}")
        kw["metrics"] = MetricsConfig(r.string("metrics.address", m.get("address", md.address)), port)
    events = data.get("events") or {}
    if not isinstance(events, Mapping):
        raise r.fail("events", "must be a mapping with the key socket")
    if events.get("socket") is not None:
        kw["events_socket"] = _resolve(base, r.string("events.socket", events["socket"]))
        if not kw["events_socket"].parent.is_dir():
            raise r.fail(
                "events.socket",
                f"folder {kw['events_socket'].parent} does not exist; create it"
                " (the controller makes the socket itself) or remove the key",
            )
    return ControllerConfig(**{**d.__dict__, **kw})


def load_config(path: str | os.PathLike[str] | None = None) -> ControllerConfig:
    """Read and validate the site's config file (``--config``, else $TEIRESIAS_CONFIG,
    else /etc/teiresias/teiresias.yaml: the one path every command uses, docs/admin.md)."""
    chosen = Path(path or os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG)
    # Not-UTF-8, BOM, directory, YAML errors: the shared format of teiresias/yamlconf.py.
    data = yamlconf.load_yaml(chosen, "config", hint="; pass --config FILE")
    return parse_config(data, str(chosen), chosen.resolve().parent)


def profile_store_root(
    env: Mapping[str, str], store: str | None = None, config: str | os.PathLike[str] | None = None
) -> Path:
    """Where the controller keeps communication profiles (Tiresias §3.3.1 reuses a
    model's profile): ``store`` when given, else ``$TEIRESIAS_PROFILE_STORE`` in
    ``env``, else the profile store of the site's config (``config``, else
    ``$TEIRESIAS_CONFIG``, else /etc/teiresias/teiresias.yaml). ConfigError when that
    config cannot be used; each caller decides whether that is fatal."""
    chosen = store or env.get(ENV_PROFILE_STORE)
    if chosen:
        return Path(os.path.expanduser(chosen))
    return load_config(config or env.get(ENV_CONFIG) or DEFAULT_CONFIG).profiles
