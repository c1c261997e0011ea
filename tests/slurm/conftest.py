"""Fixtures shared by every test that needs the real local Slurm cluster.

``slurm_cluster`` (session): brings up, or reuses when already up with the
same configuration, ONE local cluster of 4 nodes x 4 fake GPUs with
partitions ``gpu`` (default, managed) and ``other``. ``clean_slurm``
(function): the same object; before and after the test every job is
cancelled, the queue is waited empty and drained nodes are resumed.

Environment:
  TEIRESIAS_TEST_CLUSTER_DIR        cluster directory (default /var/tmp/teiresias-test-cluster)
  TEIRESIAS_TEST_CLUSTER_PORT_BASE  slurmctld port, node i on +i (default 17100)
  TEIRESIAS_TEST_CLUSTER_KEEP=1     leave the cluster running after the session
Engineers working in parallel set the first two to their own values (two
sessions on one directory would cancel each other's jobs in ``clean_slurm``;
the last one to finish stops the cluster).

Example:
    @pytest.mark.slurm
    def test_runs(clean_slurm):
        job = clean_slurm.submit("sleep 30", "-G", "2")
        clean_slurm.wait_for(job, "RUNNING", timeout=20)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_plugin.backends.base import SlurmJob
from slurm_plugin.backends.cli import CliBackend
from slurm_plugin.backends.parse import FINISHED_STATES
from slurm_plugin.localcluster import ClusterConfig, LocalCluster, client_env, procs
from teiresias.errors import JobVanished

TSBATCH = str(Path(sys.executable).with_name("tsbatch"))
DEFAULT_TEST_DIR = "/var/tmp/teiresias-test-cluster"
DEFAULT_TEST_PORT_BASE = 17100


def test_cluster_config() -> ClusterConfig:
    """The test cluster's configuration (env vars above)."""
    return ClusterConfig(
        dir=Path(os.environ.get("TEIRESIAS_TEST_CLUSTER_DIR", DEFAULT_TEST_DIR)),
        nodes=4,
        gpus_per_node=4,
        port_base=int(os.environ.get("TEIRESIAS_TEST_CLUSTER_PORT_BASE", DEFAULT_TEST_PORT_BASE)),
        partitions=("gpu", "other"),
    )


test_cluster_config.__test__ = False  # type: ignore[attr-defined]  # not a test


def own_cluster_config(suffix: str, port_offset: int, **kw: Any) -> ClusterConfig:
    """The configuration of a module's own cluster beside the shared one: directory
    DIR-``suffix``, slurmctld on PORT_BASE+``port_offset`` (its nodes on the ports after),
    ``kw`` the rest of its ClusterConfig (nodes, gpus_per_node, partitions, ...)."""
    base = test_cluster_config()
    return ClusterConfig(dir=Path(f"{base.dir}-{suffix}"), port_base=base.port_base + port_offset, **kw)


@contextmanager
def own_cluster(cfg: ClusterConfig) -> Iterator[SlurmTestCluster]:
    """Bring up a module's own cluster for a module-scoped fixture; down at the end
    (unless TEIRESIAS_TEST_CLUSTER_KEEP=1). Skips the tests without root."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd runs as root, fake GPUs need mknod)")
    cluster = LocalCluster(cfg)
    cluster.up()
    try:
        yield SlurmTestCluster(cluster)
    finally:
        if os.environ.get("TEIRESIAS_TEST_CLUSTER_KEEP") != "1":
            cluster.down()


def tsbatch_submit(cluster: SlurmTestCluster, *args: str) -> int:
    """``tsbatch ARGS`` on ``cluster`` (one thread per job's torch): the job id it printed."""
    r = subprocess.run(
        [TSBATCH, *args], env={**cluster.env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout)
    assert m, r.stdout
    return int(m.group(1))


class SlurmTestCluster:
    """Handle on the running test cluster.

    ``conf`` SLURM_CONF path; ``env`` environment for subprocesses (SLURM_CONF
    set, no stray SLURM_*); ``dir``; ``nodes`` names; ``backend`` a CliBackend;
    ``jobs_dir`` the world-writable working directory jobs run in by default.
    """

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.cfg = cluster.cfg
        self.conf: Path = cluster.cfg.conf
        self.dir: Path = cluster.cfg.dir
        self.nodes: tuple[str, ...] = cluster.cfg.node_names
        self.gpus_per_node: int = cluster.cfg.gpus_per_node
        self.partitions: tuple[str, ...] = cluster.cfg.partitions
        self.env: dict[str, str] = client_env(self.conf)
        self.backend = CliBackend(env=self.env)
        self.jobs_dir: Path = self.dir / "jobs"

    # ------------------------------------------------------------ jobs
    def submit(self, script: str | os.PathLike[str], *sbatch_args: str, env: dict[str, str] | None = None) -> int:
        """Submit with sbatch; returns the job id.

        ``script``: a path to a script file, or script text (a ``#!`` line is
        added if missing; a single line like ``"sleep 30"`` is fine). Jobs run
        in ``jobs_dir`` unless ``--chdir``/``-D`` is given; ``env`` adds
        variables to the submitting environment (sbatch exports it to the job).
        """
        backend = self.backend if env is None else CliBackend(env={**self.env, **env})
        text = os.fspath(script)
        is_path = "\n" not in text and not text.startswith("#!") and Path(text).is_file()
        if not is_path and not text.startswith("#!"):
            text = "#!/bin/bash\n" + text + ("\n" if not text.endswith("\n") else "")
        args = list(sbatch_args)
        if not any(a.startswith(("--chdir", "-D")) for a in args):
            args = [f"--chdir={self.jobs_dir}", *args]
        if not any(a.startswith(("--output", "-o")) for a in args):
            args = [f"--output={self.jobs_dir}/slurm-%j.out", *args]
        return backend.submit(text, *args)

    def job(self, job_id: int) -> SlurmJob:
        return self.backend.job(job_id)

    def wait_for(self, job_id: int, states: str | Iterable[str], timeout: float = 30.0, where=None) -> SlurmJob:
        """Poll until the job is in one of ``states`` (and ``where(job)`` holds,
        if given); returns it. Fails at once if the job ends in another state,
        and after ``timeout`` seconds with the last state seen."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        last: SlurmJob | None = None
        while True:
            try:
                last = self.backend.job(job_id)
            except JobVanished:
                last = None
            if last is not None and last.state in wanted and (where is None or where(last)):
                return last
            if last is not None and last.state in FINISHED_STATES and last.state not in wanted:
                raise AssertionError(
                    f"job {job_id} ended {last.state} ({last.state_reason}) while waiting "
                    f"for {sorted(wanted)}; output: {self.output(job_id)[-500:]!r}"
                )
            if time.monotonic() >= deadline:
                seen = f"{last.state} ({last.state_reason})" if last else "unknown to Slurm"
                raise AssertionError(f"job {job_id} not {sorted(wanted)} after {timeout:.0f}s: {seen}")
            time.sleep(0.2)

    def output(self, job_id: int) -> str:
        """The job's default output file (``jobs_dir/slurm-ID.out``), '' if none."""
        try:
            return (self.jobs_dir / f"slurm-{job_id}.out").read_text(errors="replace")
        except OSError:
            return ""

    def active_jobs(self) -> list[int]:
        return [int(j) for j in self.cluster.active_job_ids()]

    def clean(self, timeout: float = 30.0) -> None:
        """Cancel every job, wait until none is active, resume drained nodes.
        A daemon that a test stopped (or killed) is started again first."""
        if not self.cluster.daemons_alive() or not self.cluster.ping():
            self.cluster.up()
        self.cluster.cancel_all_jobs(timeout=timeout)
        left = self.active_jobs()
        if left:
            raise AssertionError(f"jobs still active {timeout:.0f}s after scancel: {left}")
        self.resume_nodes()

    def resume_nodes(self) -> None:
        states = self.cluster.node_states()
        bad = sorted(n for n, s in states.items() if s.rstrip("*~#!%$@^-") in ("drain", "drng", "down", "fail"))
        if bad:
            self.cluster._run("scontrol", "update", f"nodename={','.join(bad)}", "state=resume")
            self.cluster._wait_ready(kick=False, timeout=30)

    # ------------------------------------------------------------ extras
    def ensure_restd(self) -> Path:
        """Start slurmrestd (unix socket, rest_auth/local) if not running; its socket."""
        self.cluster.up(restd=True)
        return self.cfg.restd_socket

    @contextmanager
    def reconfigured(self, **changes) -> Iterator[SlurmTestCluster]:
        """Run with a changed configuration (e.g. ``job_submit_lua=PATH``), then
        restore the test configuration. Each switch restarts the daemons (~1 s)."""
        self.clean()
        LocalCluster(replace(self.cfg, **changes)).up()
        try:
            yield self
        finally:
            try:
                self.clean()
            finally:
                LocalCluster(self.cfg).up()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmTestCluster]:
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd runs as root, fake GPUs need mknod)")
    cluster = LocalCluster(test_cluster_config())
    cluster.up()
    # another pytest session on the same directory must not lose its cluster
    # when this one ends: each session leaves a marker named by its pid
    sessions = cluster.cfg.dir / "sessions"
    sessions.mkdir(exist_ok=True)
    mine = sessions / str(os.getpid())
    mine.touch()
    handle = SlurmTestCluster(cluster)
    try:
        yield handle
    finally:
        mine.unlink(missing_ok=True)
        others = [m for m in sessions.iterdir() if m.name.isdigit() and procs.is_alive(int(m.name))]
        if os.environ.get("TEIRESIAS_TEST_CLUSTER_KEEP") != "1" and not others:
            cluster.down()


@pytest.fixture
def clean_slurm(slurm_cluster: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    slurm_cluster.clean()
    yield slurm_cluster
    slurm_cluster.clean()


# ------------------------------------------------ the live controller tests' fixtures


@pytest.fixture(scope="module")
def lua_cluster(slurm_cluster):
    """The test cluster with etc/job_submit.lua installed (jobs held at submission)."""
    from tests.slurm.controller_support import LUA

    with slurm_cluster.reconfigured(job_submit_lua=LUA) as c:
        c.lua_cfg = replace(c.cfg, job_submit_lua=LUA)
        yield c


@pytest.fixture
def cluster(lua_cluster) -> Iterator[Any]:
    lua_cluster.clean()
    yield lua_cluster
    lua_cluster.clean()


@pytest.fixture
def make_controller(cluster, tmp_path) -> Iterator[Callable[..., Any]]:
    """Start `teiresias controller run` subprocesses (ControllerProc); all stopped at teardown."""
    from tests.slurm.controller_support import ControllerProc

    made: list[ControllerProc] = []

    def make(**overrides: Any) -> ControllerProc:
        c = ControllerProc(tmp_path, cluster, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
