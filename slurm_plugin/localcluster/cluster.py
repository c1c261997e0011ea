"""Start, stop and inspect the local Slurm cluster (munged, slurmctld, one
slurmd per node, optional slurmrestd, optional slurmdbd + MariaDB for
accounting), all state under one directory.

Every process is tracked by a pid file under the cluster directory and is
only ever signalled after ``/proc/PID/comm`` confirms it is what we started
(``procs.py``). ``up`` is idempotent: with the same configuration and live
daemons it starts nothing; with a changed configuration it restarts the
daemons and keeps Slurm's state (running jobs survive a slurmd restart).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurm_plugin.localcluster import procs
from slurm_plugin.localcluster.config import POKE_NAME, ClusterConfig, fingerprint, rendered_files
from slurm_plugin.localcluster.errors import LocalClusterError
from slurm_plugin.localcluster.packages import JOB_SUBMIT_LUA_SO, ensure_packages

READY_STATES = {"idle", "alloc", "mix", "comp"}  # sinfo %t states a job can start on (or soon)
STATE_FILE = "cluster.json"  # the configuration the running daemons were started with
# kept running across a configuration change (restarted only by down/up):
# the Slurm daemons do not need them restarted to read a new slurm.conf
_KEPT = ("munged", "mariadbd")


@dataclass
class ProcessStatus:
    name: str
    pid: int | None
    alive: bool


@dataclass
class ClusterStatus:
    dir: str
    conf: str
    running: bool  # slurmctld answers
    ready: bool  # every node accepts jobs
    processes: list[ProcessStatus] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)  # name -> sinfo compact state
    restd_socket: str | None = None
    accounting: bool = False  # slurmdbd answers: sacct works

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class UpResult:
    conf: str
    dir: str
    changed: bool  # something was (re)started or (re)written
    installed: list[str]
    started: list[str]
    seconds: float
    restd_socket: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def client_env(conf: Path | str, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for Slurm client commands of one cluster: SLURM_CONF set,
    and no inherited SLURM_* variable that could point elsewhere."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)
    return env


class LocalCluster:
    """The cluster living under ``cfg.dir``. ``log`` receives progress lines."""

    def __init__(self, cfg: ClusterConfig, log: Callable[[str], None] = lambda msg: None):
        self.cfg = cfg
        self.log = log
        self.env = client_env(cfg.conf)

    # ------------------------------------------------------------ helpers
    def _run(
        self, *cmd: str, timeout: float = 15.0, env: dict[str, str] | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        try:
            r = subprocess.run(
                list(cmd),
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env or self.env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LocalClusterError(f"{cmd[0]} did not finish in {timeout:.0f}s") from None
        if check and r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
            raise LocalClusterError(f"{' '.join(cmd[:2])} failed ({r.returncode}): {msg}")
        return r

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One up/down at a time per directory (tests of several engineers
        may share one)."""
        self.cfg.dir.mkdir(parents=True, exist_ok=True)
        with open(self.cfg.dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _pidfiles(self) -> list[tuple[str, Path, str]]:
        """(label, pidfile, comm) for every daemon this directory may hold, outermost first."""
        run = self.cfg.run
        out = [("slurmrestd", run / "slurmrestd.pid", "slurmrestd")]
        for pf in sorted(run.glob("slurmd-*.pid")):
            out.append((pf.stem, pf, "slurmd"))
        out.append(("slurmctld", run / "slurmctld.pid", "slurmctld"))
        out.append(("slurmdbd", run / "slurmdbd.pid", "slurmdbd"))
        out.append(("mariadbd", self.cfg.mysql_dir / "mysqld.pid", "mariadbd"))
        out.append(("munged", self.cfg.munge_dir / "munged.pid", "munged"))
        return out

    def ctld_pid(self) -> int | None:
        return procs.pid_from_file(self.cfg.run / "slurmctld.pid", "slurmctld")

    def ping(self) -> bool:
        if self.ctld_pid() is None or not self.cfg.conf.exists():
            return False
        r = self._run("scontrol", "ping", timeout=10)
        return r.returncode == 0 and "is UP" in r.stdout

    def node_states(self) -> dict[str, str]:
        """node -> compact sinfo state (``idle``, ``mix``, ``drain``, ``idle*``...)."""
        r = self._run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
        if r.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]  # a node in two partitions is listed twice
        return states

    def active_job_ids(self) -> list[str]:
        # plain squeue (unlike --json) lists only pending/running/suspended/completing jobs
        r = self._run("squeue", "-h", "-o", "%A", timeout=15)
        return [x for x in r.stdout.split() if x.isdigit()] if r.returncode == 0 else []

    def _log_tail(self, name: str, lines: int = 3) -> str:
        p = self.cfg.log / name
        try:
            tail = [line for line in p.read_text(errors="replace").splitlines() if line.strip()][-lines:]
        except OSError:
            return f"(no log at {p})"
        return " | ".join(tail) + f" (log: {p})"

    # ------------------------------------------------------------ up
    def up(self, restd: bool = False) -> UpResult:
        """Install what is missing, write the configuration, start what is not
        running, and return once every node accepts jobs."""
        t0 = time.monotonic()
        if os.geteuid() != 0:
            raise LocalClusterError(
                "the local cluster needs root (it starts slurmd as root and makes fake GPU device nodes): run as root"
            )
        installed = ensure_packages(restd, self.log, accounting=self.cfg.accounting)
        if self.cfg.job_submit_lua is not None and not JOB_SUBMIT_LUA_SO.exists():
            raise LocalClusterError(
                f"--job-submit-lua needs {JOB_SUBMIT_LUA_SO} (package slurm-wlm-basic-plugins), which is missing"
            )
        started: list[str] = []
        with self._locked():
            before = self._live_labels()
            try:
                changed = self._write_config()
                self._make_devices()
                if self._ensure_munged():
                    started.append("munged")
                if self.cfg.accounting:
                    # before slurmctld, so that it registers the cluster at once
                    started += self._ensure_accounting()
                if self._ensure_slurmctld():
                    started.append("slurmctld")
                started += self._ensure_slurmds()
                self._wait_ready(kick=bool(started))
                if restd and self._ensure_restd():
                    started.append("slurmrestd")
                self._write_env_sh()
            except BaseException:
                # leave nothing behind that this call started (and no one will `down`)
                try:
                    self._stop_daemons(include_munge=True, only_not_in=before)
                except LocalClusterError as cleanup:
                    self.log(f"after the failed start: {cleanup}")
                raise
        return UpResult(
            conf=str(self.cfg.conf),
            dir=str(self.cfg.dir),
            changed=changed or bool(started),
            installed=installed,
            started=started,
            seconds=round(time.monotonic() - t0, 2),
            restd_socket=str(self.cfg.restd_socket) if restd else None,
        )

    def _write_config(self) -> bool:
        """Write etc/*; if it differs from what the live daemons run with,
        stop them first (state is kept). Returns True when anything changed."""
        cfg = self.cfg
        for sub in ("etc", "log", "run", "dev", "state/ctld", "state/d", "jobs", "munge"):
            (cfg.dir / sub).mkdir(parents=True, exist_ok=True)
        # clients of any user must reach the munge socket: add o+x to DIR, never
        # take bits away (DIR may be an existing shared directory such as /tmp)
        mode = cfg.dir.stat().st_mode
        if mode & 0o011 != 0o011:
            os.chmod(cfg.dir, (mode & 0o7777) | 0o011)
        os.chmod(cfg.munge_dir, 0o755)  # munged: socket dir o+x, not group/other-writable
        os.chmod(cfg.dir / "jobs", 0o1777)  # scratch cwd for jobs of any user
        for name in cfg.node_names:
            (cfg.dir / "state" / "d" / name).mkdir(exist_ok=True)
        files = rendered_files(cfg, self._db_password() if cfg.accounting else None)
        fp = fingerprint(files)
        state_path = cfg.dir / STATE_FILE
        try:
            old_fp = json.loads(state_path.read_text()).get("fingerprint")
        except (OSError, ValueError):
            old_fp = None
        if old_fp == fp and all((cfg.etc / n).exists() for n in files):
            return False
        if any(procs.pid_from_file(pf, comm) for label, pf, comm in self._pidfiles() if comm not in _KEPT):
            self.log("configuration changed: restarting the Slurm daemons (state kept)")
            self._stop_daemons(include_munge=False)
        for name, text in files.items():
            tmp = cfg.etc / (name + ".new")
            tmp.unlink(missing_ok=True)
            # slurmdbd refuses a slurmdbd.conf others can read (it holds the DB password)
            mode = {"slurmdbd.conf": 0o600, POKE_NAME: 0o755}.get(name, 0o644)  # the poke is run by slurmctld
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            tmp.replace(cfg.etc / name)
        for optional in ("job_submit.lua", "slurmdbd.conf", POKE_NAME):
            if optional not in files:
                (cfg.etc / optional).unlink(missing_ok=True)
        state = {
            "fingerprint": fp,
            "nodes": cfg.nodes,
            "gpus_per_node": cfg.gpus_per_node,
            "port_base": cfg.port_base,
            "partitions": list(cfg.partitions),
            "job_submit_lua": str(cfg.job_submit_lua) if cfg.job_submit_lua else None,
            "accounting": cfg.accounting,
            "events": cfg.events,
        }
        state_path.write_text(json.dumps(state, indent=1) + "\n")
        return True

    def _make_devices(self) -> None:
        for g in range(self.cfg.gpus_per_node):
            dev = self.cfg.dir / "dev" / f"nvidia{g}"
            if dev.is_char_device():
                continue
            dev.unlink(missing_ok=True)
            try:
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # S_IFCHR, same numbers as /dev/null
            except OSError:
                dev.symlink_to("/dev/null")  # no CAP_MKNOD: a link to a char device is accepted too

    def _ensure_munged(self) -> bool:
        m = self.cfg.munge_dir
        key = m / "munge.key"
        if not key.exists() or key.stat().st_size == 0:
            self._run("mungekey", "--create", f"--keyfile={key}", "--bits=1024", check=True)
            os.chmod(key, 0o600)
        if procs.pid_from_file(m / "munged.pid", "munged"):
            return False
        self._run(
            "munged",
            f"--key-file={key}",
            f"--socket={self.cfg.munge_socket}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={self.cfg.log / 'munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
            "--force",
            check=True,
        )
        self._wait_pidfile(m / "munged.pid", "munged", "munged.log")
        ok = procs.wait_until(
            lambda: (
                self._run(
                    "bash", "-c", f"munge -n -S {self.cfg.munge_socket} | unmunge -S {self.cfg.munge_socket}"
                ).returncode
                == 0
            ),
            10,
            0.1,
        )
        if not ok:
            raise LocalClusterError(f"munged did not answer in 10s: {self._log_tail('munged.log')}")
        return True

    def _db_password(self) -> str:
        """slurmdbd's MariaDB password, made once per directory (kept, so that
        the rendered slurmdbd.conf and its fingerprint stay the same)."""
        pw_file = self.cfg.mysql_dir / "slurmdbd.pass"
        try:
            pw = pw_file.read_text().strip()
        except FileNotFoundError:
            pw = ""
        if not pw:
            self.cfg.mysql_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.cfg.mysql_dir, 0o700)
            pw = secrets.token_hex(16)  # hex: nothing to quote in SQL or slurmdbd.conf
            fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(pw + "\n")
        return pw

    def _ensure_accounting(self) -> list[str]:
        started = []
        if self._ensure_mariadb():
            started.append("mariadbd")
        if self._ensure_slurmdbd():
            started.append("slurmdbd")
        return started

    def _mariadb_sql(self, sql: str, timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
        return self._run(
            "mariadb", "--no-defaults", f"--socket={self.cfg.mysql_socket}", "-uroot", "-e", sql, timeout=timeout
        )

    def _ensure_mariadb(self) -> bool:
        """A private MariaDB server: its own datadir, socket and 127.0.0.1 port,
        no /etc/mysql settings (--no-defaults), so it never meets the host's."""
        cfg = self.cfg
        data = cfg.mysql_dir / "data"
        pf = cfg.mysql_dir / "mysqld.pid"
        started = False
        if procs.pid_from_file(pf, "mariadbd") is None:
            if procs.port_in_use(cfg.mysql_port):
                raise LocalClusterError(
                    f"port {cfg.mysql_port} (MariaDB) is already in use by another process: choose another --port-base"
                )
            if not (data / "mysql").is_dir():
                r = self._run(
                    "mariadb-install-db",
                    "--no-defaults",
                    "--user=root",
                    f"--datadir={data}",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                    timeout=180,
                )
                (cfg.log / "mariadb-install.log").write_text(r.stdout + r.stderr)
                if r.returncode != 0:
                    raise LocalClusterError(
                        f"mariadb-install-db failed ({r.returncode}): {self._log_tail('mariadb-install.log', 1)}"
                    )
            pf.unlink(missing_ok=True)
            with open(cfg.log / "mariadb.log", "ab") as logf:
                p = subprocess.Popen(
                    [
                        "mariadbd",
                        "--no-defaults",
                        "--user=root",
                        f"--datadir={data}",
                        f"--socket={cfg.mysql_socket}",
                        f"--pid-file={pf}",
                        "--bind-address=127.0.0.1",
                        f"--port={cfg.mysql_port}",
                        f"--log-error={cfg.log}/mariadb.err",
                        # small: the accounting of a test cluster is a few hundred rows
                        "--innodb-buffer-pool-size=32M",
                        "--skip-name-resolve",
                    ],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started = True

            def answers() -> bool:
                if p.poll() is not None:
                    raise LocalClusterError(f"mariadbd exited ({p.returncode}): {self._log_tail('mariadb.err')}")
                return self._mariadb_sql("select 1").returncode == 0

            if not procs.wait_until(answers, 60, 0.2):
                raise LocalClusterError(f"MariaDB did not answer in 60s: {self._log_tail('mariadb.err')}")
            self._wait_pidfile(pf, "mariadbd", "mariadb.err")
        pw = self._db_password()
        grants = "; ".join(
            f"CREATE USER IF NOT EXISTS 'slurm'@'{h}' IDENTIFIED BY '{pw}'; "
            f"ALTER USER 'slurm'@'{h}' IDENTIFIED BY '{pw}'; "
            f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}'"
            for h in ("127.0.0.1", "localhost")
        )
        r = self._mariadb_sql(grants + "; FLUSH PRIVILEGES")
        if r.returncode != 0:
            raise LocalClusterError(
                f"could not create slurmdbd's database user: {(r.stderr.strip() or 'no output').splitlines()[-1]}"
            )
        return started

    def _ensure_slurmdbd(self) -> bool:
        pf = self.cfg.run / "slurmdbd.pid"
        if procs.pid_from_file(pf, "slurmdbd"):
            return False
        if procs.port_in_use(self.cfg.dbd_port):
            raise LocalClusterError(
                f"port {self.cfg.dbd_port} (slurmdbd) is already in use by another process: choose another --port-base"
            )
        # slurmdbd reads slurmdbd.conf beside $SLURM_CONF, and daemonizes
        self._run("slurmdbd", check=True)
        self._wait_pidfile(pf, "slurmdbd", "slurmdbd.log")

        def listening() -> bool:
            if procs.pid_from_file(pf, "slurmdbd") is None:
                raise LocalClusterError(f"slurmdbd exited: {self._log_tail('slurmdbd.log', 1)}")
            return procs.port_in_use(self.cfg.dbd_port)

        # the first start creates the tables: several seconds on two cores
        if not procs.wait_until(listening, 90, 0.2):
            raise LocalClusterError(
                f"slurmdbd did not listen on {self.cfg.dbd_port} in 90s: {self._log_tail('slurmdbd.log')}"
            )
        return True

    def accounting_ok(self) -> bool:
        """sacct can reach slurmdbd (cheap query: one job id that never exists)."""
        if not self.cfg.accounting or not self.cfg.conf.exists():
            return False
        r = self._run("sacct", "-n", "-X", "-j", "1", "-o", "JobID", timeout=15)
        return r.returncode == 0

    def _ensure_slurmctld(self) -> bool:
        started = False
        if self.ctld_pid() is None:
            if procs.port_in_use(self.cfg.port_base):
                raise LocalClusterError(
                    f"port {self.cfg.port_base} is already in use by another process: choose another --port-base"
                )
            # -i: tolerate missing or stale state files (first start, changed node set)
            self._run("slurmctld", "-i", check=True)
            started = True
            self._wait_pidfile(self.cfg.run / "slurmctld.pid", "slurmctld", "slurmctld.log")
        t0 = time.monotonic()

        def answered_or_died() -> bool:
            if self.ping():
                return True
            # a fatal configuration error ends the daemon within a second or two
            if time.monotonic() - t0 > 3 and self.ctld_pid() is None:
                raise LocalClusterError(f"slurmctld exited: {self._log_tail('slurmctld.log', 1)}")
            return False

        if not procs.wait_until(answered_or_died, 30, 0.2):
            raise LocalClusterError(f"slurmctld did not answer in 30s: {self._log_tail('slurmctld.log')}")
        return started

    def _ensure_slurmds(self) -> list[str]:
        started = []
        for i, name in enumerate(self.cfg.node_names, start=1):
            if procs.pid_from_file(self.cfg.run / f"slurmd-{name}.pid", "slurmd"):
                continue
            if procs.port_in_use(self.cfg.node_port(i)):
                raise LocalClusterError(
                    f"port {self.cfg.node_port(i)} (node {name}) is already in use: choose another --port-base"
                )
            self._run("slurmd", "-N", name, check=True)
            started.append(f"slurmd-{name}")
            self._wait_pidfile(self.cfg.run / f"slurmd-{name}.pid", "slurmd", f"slurmd-{name}.log")
        return started

    def _wait_pidfile(self, pf: Path, comm: str, log: str, timeout: float = 15.0) -> None:
        """The daemon forks and its parent exits before the pid file is written:
        wait for it, so that every started daemon can be found (and stopped)."""
        if not procs.wait_until(lambda: procs.pid_from_file(pf, comm) is not None, timeout, 0.05):
            raise LocalClusterError(f"{comm} wrote no pid file {pf} within {timeout:.0f}s: {self._log_tail(log, 1)}")

    def _wait_ready(self, kick: bool, timeout: float = 60.0) -> None:
        """Until every node is idle/alloc/mix; resume nodes left drained or down
        by an earlier run (a drain persists across restarts)."""
        want = set(self.cfg.node_names)
        deadline = time.monotonic() + timeout
        kicked_at = time.monotonic() + (5.0 if kick else 0.0)
        kicked = False
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            # slurmctld restores node states from its state files before the
            # slurmd register, so a node also needs its slurmd listening
            bad = {
                n
                for i, n in enumerate(self.cfg.node_names, start=1)
                if states.get(n) not in READY_STATES or not procs.port_in_use(self.cfg.node_port(i))
            }
            if not bad:
                return
            resumable = sorted(
                n for n in bad if states.get(n, "").rstrip("*~#!%$@^-") in ("drain", "drng", "down", "fail", "failg")
            )
            if resumable:
                self._run("scontrol", "update", f"nodename={','.join(resumable)}", "state=resume")
            # after a slurmctld restart nodes may sit in UNKNOWN until the next
            # ping; a reconfigure makes them register now
            if not kicked and time.monotonic() > kicked_at and any(states.get(n, "unk").startswith("unk") for n in bad):
                self._run("scontrol", "reconfigure")
                kicked = True
            time.sleep(0.2)
        raise LocalClusterError(
            f"nodes not ready after {timeout:.0f}s: "
            + ", ".join(f"{n}={states.get(n, 'missing')}" for n in sorted(want))
            + f"; see {self.cfg.log}/slurmd-*.log"
        )

    def _ensure_restd(self) -> bool:
        from slurm_plugin.backends.restd import unix_http  # only needed with --restd

        pf = self.cfg.run / "slurmrestd.pid"
        sock = self.cfg.restd_socket
        if procs.pid_from_file(pf, "slurmrestd"):
            return False
        sock.unlink(missing_ok=True)
        env = dict(self.env, SLURMRESTD_SECURITY="disable_user_check")
        with open(self.cfg.log / "slurmrestd.log", "ab") as logf:
            p = subprocess.Popen(
                ["slurmrestd", "-a", "rest_auth/local", "-s", "openapi/v0.0.38", f"unix:{sock}"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        pf.write_text(f"{p.pid}\n")

        def answers() -> bool:
            if p.poll() is not None:
                raise LocalClusterError(f"slurmrestd exited ({p.returncode}): {self._log_tail('slurmrestd.log')}")
            try:
                status, body = unix_http(str(sock), "GET", "/slurm/v0.0.38/ping", timeout=2)
            except OSError:
                return False
            return status == 200 and b"UP" in body

        if not procs.wait_until(answers, 20, 0.1):
            raise LocalClusterError(f"slurmrestd did not answer in 20s: {self._log_tail('slurmrestd.log')}")
        return True

    def _write_env_sh(self) -> None:
        lines = [f"export SLURM_CONF={self.cfg.conf}", f"export TEIRESIAS_CLUSTER_DIR={self.cfg.dir}"]
        if self.cfg.restd_socket.exists():
            lines.append(f"export SLURMRESTD_SOCKET={self.cfg.restd_socket}")
        (self.cfg.dir / "env.sh").write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------ down
    def down(self) -> list[str]:
        """Cancel every job, then stop every daemon by pid (and any slurmstepd
        of this cluster that outlived its slurmd). Returns what was stopped."""
        with self._locked():
            self.cancel_all_jobs()
            stopped = self._stop_daemons(include_munge=True)
            # a slurmstepd outlives its slurmd; jobs cancelled above normally took
            # theirs along, this catches the ones a dead slurmctld could not cancel
            for pid in procs.pids_with_cwd_under("slurmstepd", self.cfg.dir):
                children = procs.descendants(pid)
                procs.stop_pid(pid, "slurmstepd", timeout=5)
                for child in children:
                    procs.kill_if_alive(child)
                stopped.append(f"slurmstepd({pid})")
            for pid in procs.job_pids(self.cfg.conf):  # job processes that escaped their step
                procs.kill_if_alive(pid)
                stopped.append(f"job process({pid})")
            self.cfg.restd_socket.unlink(missing_ok=True)
        return stopped

    def cancel_all_jobs(self, timeout: float = 30.0) -> None:
        if not self.ping():
            return
        ids = self.active_job_ids()
        if not ids:
            return
        self.log(f"cancelling {len(ids)} job(s)")
        self._run("scancel", *ids, timeout=60)
        if not procs.wait_until(lambda: not self.active_job_ids(), timeout, 0.2):
            self.log(f"jobs still active after {timeout:.0f}s: {' '.join(self.active_job_ids())}")

    def daemons_alive(self) -> bool:
        """munged, slurmctld, every node's slurmd (and with accounting slurmdbd
        and mariadbd) run (by their pid files)."""
        want = {"munged", "slurmctld", *(f"slurmd-{n}" for n in self.cfg.node_names)}
        if self.cfg.accounting:
            want |= {"slurmdbd", "mariadbd"}
        return want <= self._live_labels()

    def _live_labels(self) -> set[str]:
        return {label for label, pf, comm in self._pidfiles() if procs.pid_from_file(pf, comm)}

    def _stop_daemons(self, include_munge: bool, only_not_in: set[str] | None = None) -> list[str]:
        """Stop daemons outermost first; one that resists does not keep the
        others running (the error is raised at the end)."""
        stopped, stuck = [], []
        for label, pf, comm in self._pidfiles():
            if (comm in _KEPT and not include_munge) or (only_not_in is not None and label in only_not_in):
                continue
            pid = procs.pid_from_file(pf, comm)
            if pid is not None:
                if not procs.stop_pid(pid, comm):
                    stuck.append(f"{label} (pid {pid})")
                    continue
                stopped.append(f"{label}({pid})")
            pf.unlink(missing_ok=True)
        if stuck:
            raise LocalClusterError(f"{', '.join(stuck)} did not stop even after SIGKILL")
        return stopped

    # ------------------------------------------------------------ status
    def status(self) -> ClusterStatus:
        st = ClusterStatus(dir=str(self.cfg.dir), conf=str(self.cfg.conf), running=False, ready=False)
        for label, pf, comm in self._pidfiles():
            pid = procs.read_pidfile(pf)
            if pid is None and label in ("slurmrestd", "slurmdbd", "mariadbd"):
                continue
            st.processes.append(ProcessStatus(label, pid, pid is not None and procs.is_alive(pid, comm)))
        st.running = self.ping()
        if st.running:
            st.nodes = self.node_states()
            st.ready = bool(st.nodes) and all(s in READY_STATES for s in st.nodes.values())
        if procs.pid_from_file(self.cfg.run / "slurmrestd.pid", "slurmrestd"):
            st.restd_socket = str(self.cfg.restd_socket)
        st.accounting = st.running and self.accounting_ok()
        return st


def config_from_dir(directory: Path | str, **overrides) -> ClusterConfig:
    """The configuration a directory's cluster was last started with (for
    ``down``/``status``), or the defaults for that directory."""
    directory = Path(directory)
    kwargs: dict = {"dir": directory}
    try:
        state = json.loads((directory / STATE_FILE).read_text())
        kwargs.update(
            nodes=state["nodes"],
            gpus_per_node=state["gpus_per_node"],
            port_base=state["port_base"],
            partitions=tuple(state["partitions"]),
        )
        if state.get("job_submit_lua") and Path(state["job_submit_lua"]).is_file():
            kwargs["job_submit_lua"] = Path(state["job_submit_lua"])
        kwargs["accounting"] = bool(state.get("accounting", False))
        kwargs["events"] = bool(state.get("events", False))
    except (OSError, ValueError, KeyError):
        pass
    kwargs.update(overrides)
    return ClusterConfig(**kwargs)
