"""What a local cluster looks like, and the Slurm files that describe it.

Pure: a ``ClusterConfig`` in, file texts out. The facts behind each setting
(multiple-slurmd, fake GPUs as character devices, no cgroups, backfill with
basic priority) are in docs/local-cluster.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from slurm_plugin.backends.gputypes import GPU_TYPE_PREFIX
from slurm_plugin.controller.events import render_poke
from teiresias.errors import ConfigError

# ClusterName of every local cluster: the second level of a tsbatch job's directory
# (teiresias/jobfiles.py job_dir) and of its spool folder.
CLUSTER_NAME = "teiresias"
DEFAULT_DIR = "/var/tmp/teiresias-cluster"
DEFAULT_PORT_BASE = 17000
DEFAULT_PARTITIONS = ("gpu", "other")
POKE_NAME = "teiresias-poke"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class ClusterConfig:
    """One local cluster. slurmctld listens on ``port_base``; node i (1-based)
    on ``port_base + i``. Every partition spans all nodes; the first is the
    default one (the controller manages it, the others it leaves alone)."""

    dir: Path = Path(DEFAULT_DIR)
    nodes: int = 4
    gpus_per_node: int = 4
    cpus_per_node: int = 8
    mem_mb: int = 16000
    port_base: int = DEFAULT_PORT_BASE
    partitions: tuple[str, ...] = DEFAULT_PARTITIONS
    job_submit_lua: Path | None = None
    accounting: bool = False  # slurmdbd + MariaDB, so that sacct works
    # GPU sharing through gres/shard (docs/sjf-bsbf.md): shards per GPU; 0 (default) leaves
    # slurm.conf and gres.conf exactly as without sharing.
    shards_per_gpu: int = 0
    # EpilogSlurmctld pokes a controller at every job end (docs/controller.md "Events").
    # Opt-in: on Slurm 22.05 an EpilogSlurmctld also stops Slurm from starting the
    # next pending job at once when a job ends (measured: 24 s, the next backfill
    # cycle, instead of 1 s), which only a controller that releases jobs makes up for.
    events: bool = False
    hostname: str = field(default_factory=lambda: socket.gethostname().split(".")[0])

    def __post_init__(self) -> None:
        object.__setattr__(self, "dir", Path(os.path.abspath(os.path.expanduser(str(self.dir)))))
        if self.job_submit_lua is not None:
            object.__setattr__(self, "job_submit_lua", Path(os.path.abspath(str(self.job_submit_lua))))
        self.validate()

    def validate(self) -> None:
        if not 1 <= self.nodes <= 128:
            raise ConfigError(f"--nodes must be between 1 and 128, got {self.nodes}")
        if not 0 <= self.gpus_per_node <= 64:
            raise ConfigError(f"--gpus-per-node must be between 0 and 64, got {self.gpus_per_node}")
        if not 0 <= self.shards_per_gpu <= 64 or (self.shards_per_gpu and not self.gpus_per_node):
            raise ConfigError(f"--shards must be between 0 and 64 and needs GPUs, got {self.shards_per_gpu}")
        if self.cpus_per_node < 1 or self.mem_mb < 100:
            raise ConfigError("cpus per node must be >= 1 and memory >= 100 MB")
        if not 1024 <= self.port_base <= 65535 - self.ports_used:
            raise ConfigError(
                f"--port-base must leave room for {self.ports_used} ports in 1024..65535, got {self.port_base}"
            )
        if not self.partitions:
            raise ConfigError("at least one partition is needed")
        for p in self.partitions:
            if not _NAME_RE.match(p):
                raise ConfigError(f"partition name {p!r} is not a valid Slurm name (letters, digits, _ and -)")
        if len(set(self.partitions)) != len(self.partitions):
            raise ConfigError(f"duplicate partition names in {','.join(self.partitions)}")
        if self.job_submit_lua is not None and not self.job_submit_lua.is_file():
            raise ConfigError(f"--job-submit-lua {self.job_submit_lua}: no such file")
        if str(self.dir) == "/":
            raise ConfigError("--dir must not be /")

    # ------------------------------------------------------------------ paths
    @property
    def etc(self) -> Path:
        return self.dir / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def run(self) -> Path:
        return self.dir / "run"

    @property
    def log(self) -> Path:
        return self.dir / "log"

    @property
    def munge_dir(self) -> Path:
        return self.dir / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket.2"

    @property
    def restd_socket(self) -> Path:
        return self.run / "slurmrestd.sock"

    @property
    def events_socket(self) -> Path:
        """Where a controller of this cluster listens for Slurm's pokes (its ``events.socket``)."""
        return self.run / "teiresias-events.sock"

    @property
    def poke(self) -> Path:
        """The EpilogSlurmctld script (slurm_plugin/controller/events.py), rendered for events_socket."""
        return self.etc / POKE_NAME

    @property
    def mysql_dir(self) -> Path:
        return self.dir / "mysql"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql_dir / "mysqld.sock"

    @property
    def ports_used(self) -> int:
        """slurmctld, one per node, and with accounting slurmdbd and MariaDB."""
        return 1 + self.nodes + (2 if self.accounting else 0)

    @property
    def dbd_port(self) -> int:
        return self.port_base + self.nodes + 1

    @property
    def mysql_port(self) -> int:
        return self.port_base + self.nodes + 2

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"node{i}" for i in range(1, self.nodes + 1))

    def node_port(self, index: int) -> int:
        """Port of node ``index`` (1-based)."""
        return self.port_base + index

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}


def render_slurm_conf(cfg: ClusterConfig) -> str:
    """slurm.conf for ``cfg``. Notes on the choices:

    - backfill + basic priority: ``sched/builtin`` ignores manual priorities,
      which the controller sets.
    - KillWait small so cancels and preemptions end quickly; MinJobAge keeps
      finished jobs visible to ``squeue --json`` long enough for the controller
      to see how they ended even across a short downtime.
    - no cgroups/systemd on this kind of host: linuxproc + task/none.
    """
    d = cfg.dir
    node_range = f"node[1-{cfg.nodes}]" if cfg.nodes > 1 else "node1"
    lines = [
        "# generated by `teiresias cluster up`; edits are overwritten",
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={cfg.hostname}(127.0.0.1)",
        f"SlurmctldPort={cfg.port_base}",
        f"SlurmdPort={cfg.port_base + 1}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={cfg.munge_socket}",
        f"StateSaveLocation={d}/state/ctld",
        f"SlurmdSpoolDir={d}/state/d/%n",
        f"SlurmctldPidFile={cfg.run}/slurmctld.pid",
        f"SlurmdPidFile={cfg.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={cfg.log}/slurmctld.log",
        f"SlurmdLogFile={cfg.log}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *_accounting_lines(cfg),
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "MailProg=/bin/true",
        "SchedulerType=sched/backfill",
        # Slurm may defer scheduling a batch job for up to 3 s by default: measured here,
        # release -> RUNNING 0.2-2.8 s with it, 0.2-0.5 s without (docs/controller.md "Events").
        "SchedulerParameters=batch_sched_delay=0",
        "PriorityType=priority/basic",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu,shard" if cfg.shards_per_gpu else "GresTypes=gpu",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        # requeue is allowed; a requeued job goes back to PENDING (see docs/slurm-backends.md)
        "JobRequeue=1",
        "MinJobAge=300",
        "KillWait=2",
        "MaxJobCount=20000",
    ]
    if cfg.events:
        # A job's end wakes the controller (docs/controller.md "Events"); the poke
        # never blocks and always exits 0, with or without a controller listening.
        lines.append(f"EpilogSlurmctld={cfg.poke}")
    if cfg.job_submit_lua is not None:
        # job_submit_lua.so is in Debian's slurm-wlm-basic-plugins; it reads
        # job_submit.lua beside slurm.conf
        lines.append("JobSubmitPlugins=lua")
    for i, name in enumerate(cfg.node_names, start=1):
        lines.append(
            f"NodeName={name} NodeHostname={cfg.hostname} NodeAddr=127.0.0.1 Port={cfg.node_port(i)} "
            f"CPUs={cfg.cpus_per_node} Boards=1 SocketsPerBoard=1 CoresPerSocket={cfg.cpus_per_node} "
            f"ThreadsPerCore=1 RealMemory={cfg.mem_mb}"
            + (f" Gres={node_gres(cfg)}" if cfg.gpus_per_node else "")
            + " State=UNKNOWN"
        )
    for k, part in enumerate(cfg.partitions):
        default = "YES" if k == 0 else "NO"
        lines.append(f"PartitionName={part} Nodes={node_range} Default={default} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _accounting_lines(cfg: ClusterConfig) -> list[str]:
    if not cfg.accounting:
        # 22.05 refuses AccountingStorageTRES=gres/gpu without slurmdbd
        return ["AccountingStorageType=accounting_storage/none"]
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={cfg.dbd_port}",
        # with auth/munge this names the munge socket for the slurmctld <->
        # slurmdbd connection; without it slurmctld dials the system munged
        f"AccountingStoragePass={cfg.munge_socket}",
        # GPUs in AllocTRES, which is what `trace from-sacct` reads
        "AccountingStorageTRES=gres/gpu",
    ]


def render_slurmdbd_conf(cfg: ClusterConfig, db_password: str) -> str:
    """slurmdbd.conf: its own MariaDB on 127.0.0.1 (TCP, since slurmdbd has no
    socket setting and the default socket may be another server's)."""
    return (
        "\n".join(
            [
                "# generated by `teiresias cluster up --accounting`; edits are overwritten",
                "AuthType=auth/munge",
                f"AuthInfo=socket={cfg.munge_socket}",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={cfg.dbd_port}",
                "SlurmUser=root",
                "DebugLevel=info",
                f"LogFile={cfg.log}/slurmdbd.log",
                f"PidFile={cfg.run}/slurmdbd.pid",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={cfg.mysql_port}",
                "StorageUser=slurm",
                f"StoragePass={db_password}",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )


def node_gres(cfg: ClusterConfig) -> str:
    """A node's ``Gres=``: ``gpu:N`` alone; with shards one Type per GPU (``gpu:g0:1,...,
    shard:g0:K,...``), the type the controller names to put a shard job on the GPU the
    plan chose (docs/gandiva.md "Which GPU a shard job gets")."""
    if not cfg.shards_per_gpu:
        return f"gpu:{cfg.gpus_per_node}"
    ids = range(cfg.gpus_per_node)
    return ",".join(
        [f"gpu:{GPU_TYPE_PREFIX}{i}:1" for i in ids] + [f"shard:{GPU_TYPE_PREFIX}{i}:{cfg.shards_per_gpu}" for i in ids]
    )


def render_gres_conf(cfg: ClusterConfig) -> str:
    """Fake GPUs: gres needs ``File=`` character devices, else 22.05 drops
    them and drains the node ("gres/gpu count reported lower than configured")."""
    if cfg.gpus_per_node == 0:
        return "# no GPUs\n"
    nodes = f"node[1-{cfg.nodes}]" if cfg.nodes > 1 else "node1"
    if cfg.shards_per_gpu:
        # One Type per GPU (g0, g1, ...) on both lines: a job released with --gres=shard:g2:N
        # gets exactly GPU 2, which is how the controller places shard jobs (untyped, Slurm
        # would put them all on the lowest GPU index: first fit). A Type also makes 22.05
        # build GPU topology, so a gpu job is never given a GPU that shard jobs use
        # (docs/gandiva.md "Which GPU a shard job gets"); Cores= is kept for the same reason.
        cores = f" Cores=0-{cfg.cpus_per_node - 1}"
        lines = []
        for i in range(cfg.gpus_per_node):
            dev = f"{cfg.dir}/dev/nvidia{i}"
            lines.append(f"NodeName={nodes} Name=gpu Type={GPU_TYPE_PREFIX}{i} File={dev}{cores}")
        for i in range(cfg.gpus_per_node):
            dev = f"{cfg.dir}/dev/nvidia{i}"
            lines.append(f"NodeName={nodes} Name=shard Type={GPU_TYPE_PREFIX}{i} Count={cfg.shards_per_gpu} File={dev}")
        return "\n".join(lines) + "\n"
    last = cfg.gpus_per_node - 1
    files = f"{cfg.dir}/dev/nvidia[0-{last}]" if last else f"{cfg.dir}/dev/nvidia0"
    return f"NodeName={nodes} Name=gpu File={files}\n"


def rendered_files(cfg: ClusterConfig, db_password: str | None = None) -> dict[str, str]:
    """Every file under ``etc/`` by name; the lua script is copied verbatim.
    With accounting, ``db_password`` (slurmdbd's MariaDB password) is needed."""
    files = {"slurm.conf": render_slurm_conf(cfg), "gres.conf": render_gres_conf(cfg)}
    if cfg.accounting:
        if not db_password:
            raise ValueError("accounting needs the database password")
        files["slurmdbd.conf"] = render_slurmdbd_conf(cfg, db_password)
    if cfg.job_submit_lua is not None:
        files["job_submit.lua"] = cfg.job_submit_lua.read_text()
    if cfg.events:
        files[POKE_NAME] = render_poke(str(cfg.events_socket))
    return files


def fingerprint(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]
