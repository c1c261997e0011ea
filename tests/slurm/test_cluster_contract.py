"""`teiresias cluster up|status|down` against real daemons, on a small
cluster of its own (beside the shared test cluster) so that `down` can be
checked to leave no process behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin.localcluster import procs
from tests.slurm.conftest import test_cluster_config

pytestmark = pytest.mark.slurm

if os.geteuid() != 0:
    pytest.skip("the local Slurm cluster needs root", allow_module_level=True)

BASE = test_cluster_config()
DIR = Path(str(BASE.dir) + "-contract")
PORT = BASE.port_base + 50
TEIRESIAS = [sys.executable, "-m", "teiresias"]


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*TEIRESIAS, "cluster", *args], capture_output=True, text=True, timeout=180)
    if check and r.returncode != 0:
        raise AssertionError(f"cluster {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def up(*extra: str) -> dict:
    r = cli("up", "--dir", str(DIR), "--port-base", str(PORT), "-n", "2", "-g", "2", "--json", "-q", *extra)
    return json.loads(r.stdout)


def daemon_pids() -> dict[str, int]:
    """Every daemon pid the directory's pid files name (alive or not)."""
    out = {}
    for pf in [*(DIR / "run").glob("*.pid"), DIR / "munge" / "munged.pid"]:
        pid = procs.read_pidfile(pf)
        if pid is not None:
            out[pf.stem] = pid
    return out


@pytest.fixture
def contract_cluster():
    yield
    cli("down", "--dir", str(DIR), "-q", check=False)


def test_up_status_down_leaves_nothing(contract_cluster):
    res = up()
    conf = DIR / "etc" / "slurm.conf"
    assert res["SLURM_CONF"] == str(conf) and conf.exists()
    assert res["nodes"] == ["node1", "node2"]

    text = cli("up", "--dir", str(DIR), "--port-base", str(PORT), "-n", "2", "-g", "2", "-q").stdout
    assert f"SLURM_CONF={conf}" in text.splitlines()
    assert f"export SLURM_CONF={conf}" in text

    st = json.loads(cli("status", "--dir", str(DIR), "--json").stdout)
    assert st["ready"] and st["running"]
    assert set(st["nodes"]) == {"node1", "node2"} and all(s == "idle" for s in st["nodes"].values())

    # a running job gives slurmd a slurmstepd: down must cancel it and leave none behind
    env = dict(os.environ, SLURM_CONF=str(conf))
    job = subprocess.run(
        ["sbatch", "--parsable", "-G", "1", f"--chdir={DIR}/jobs", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    assert procs.wait_until(lambda: procs.pids_with_cwd_under("slurmstepd", DIR), 20), "job never started"
    steps = procs.pids_with_cwd_under("slurmstepd", DIR)
    pids = daemon_pids()
    assert {"slurmctld", "slurmd-node1", "slurmd-node2", "munged"} <= set(pids)

    r = cli("down", "--dir", str(DIR), "--json")
    stopped = json.loads(r.stdout)["stopped"]
    assert any(s.startswith("slurmctld(") for s in stopped)
    for name, pid in {**pids, **{f"step{p}": p for p in steps}}.items():
        assert not procs.is_alive(pid), f"{name} (pid {pid}) still alive after down"
    assert not procs.pids_with_cwd_under("slurmstepd", DIR)
    assert job  # it was submitted; cancelled by down

    r = cli("status", "--dir", str(DIR), "--json", check=False)
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False
    # down again: nothing to do, still exit 0
    assert "stopped" in json.loads(cli("down", "--dir", str(DIR), "--json").stdout)


def test_up_is_idempotent_and_a_changed_config_restarts_keeping_state(contract_cluster):
    up()
    before = daemon_pids()
    again = up()
    assert again["started"] == [] and again["changed"] is False
    assert daemon_pids() == before, "an identical `up` must not restart anything"

    conf = DIR / "etc" / "slurm.conf"
    env = dict(os.environ, SLURM_CONF=str(conf))
    held = subprocess.run(
        ["sbatch", "--parsable", "-H", f"--chdir={DIR}/jobs", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()

    changed = up("--partitions", "gpu,other,extra")
    assert changed["changed"] and "slurmctld" in changed["started"]
    assert daemon_pids()["slurmctld"] != before["slurmctld"]
    assert daemon_pids()["munged"] == before["munged"], "munged need not restart for a Slurm config change"
    parts = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, env=env).stdout.split()
    assert "extra" in parts
    # state kept: the held job survived the restart
    show = subprocess.run(["scontrol", "show", "job", "-o", held], capture_output=True, text=True, env=env)
    assert show.returncode == 0 and "JobState=PENDING" in show.stdout


def test_bad_input_one_line_exit_2(tmp_path):
    for args, needle in (
        (["--nodes", "0"], "--nodes"),
        (["--job-submit-lua", str(tmp_path / "missing.lua")], "missing.lua"),
        (["--partitions", "gpu,bad name"], "partition"),
    ):
        r = cli("up", "--dir", str(tmp_path / "c"), *args, check=False)
        assert r.returncode == 2, (args, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "c").exists(), "bad input must not create anything"


def test_job_submit_lua_is_installed_and_runs(contract_cluster, tmp_path):
    lua = tmp_path / "job_submit.lua"
    # tags every job's comment, so the test can see the plugin ran
    lua.write_text(
        "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
        '  job_desc.comment = "lua-was-here"\n  return slurm.SUCCESS\nend\n'
        "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
        "  return slurm.SUCCESS\nend\n"
    )
    up("--job-submit-lua", str(lua))
    assert "JobSubmitPlugins=lua" in (DIR / "etc" / "slurm.conf").read_text()
    assert (DIR / "etc" / "job_submit.lua").read_text() == lua.read_text()
    env = dict(os.environ, SLURM_CONF=str(DIR / "etc" / "slurm.conf"))
    job = subprocess.run(
        ["sbatch", "--parsable", "-H", f"--chdir={DIR}/jobs", "--wrap", "true"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    show = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env).stdout
    assert "Comment=lua-was-here" in show
    # back without the plugin: restarts, and the lua file is gone
    up()
    assert "JobSubmitPlugins" not in (DIR / "etc" / "slurm.conf").read_text()
    assert not (DIR / "etc" / "job_submit.lua").exists()


def test_failed_up_leaves_nothing_it_started(contract_cluster):
    # node2's port is taken by someone else: up fails with one line, exit 1,
    # and stops the munged/slurmctld/slurmd it had already started
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", PORT + 2))
        squatter.listen(1)
        r = cli("up", "--dir", str(DIR), "--port-base", str(PORT), "-n", "2", "-g", "2", "-q", check=False)
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(PORT + 2) in lines[0] and "--port-base" in lines[0]
    for name, pid in daemon_pids().items():
        assert not procs.is_alive(pid), f"{name} (pid {pid}) left running by a failed up"
    # also by port: a daemon that had not yet written its pid file would still listen
    assert not procs.port_in_use(PORT) and not procs.port_in_use(PORT + 1), "slurmctld/slurmd-node1 left running"


def test_down_after_slurmctld_died_still_stops_jobs(contract_cluster):
    # slurmctld killed: jobs cannot be cancelled through Slurm any more, so
    # down must stop the slurmstepd of this cluster and the job under it
    up()
    env = dict(os.environ, SLURM_CONF=str(DIR / "etc" / "slurm.conf"))
    subprocess.run(
        ["sbatch", "--parsable", "-G", "1", f"--chdir={DIR}/jobs", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )

    def job_procs() -> list[int]:
        return [p for s in procs.pids_with_cwd_under("slurmstepd", DIR) for p in procs.descendants(s)]

    # slurmstepd appears first, then forks the batch script
    assert procs.wait_until(lambda: job_procs(), 20), "the batch script never started under slurmstepd"
    steps = procs.pids_with_cwd_under("slurmstepd", DIR)
    job_procs = job_procs()
    os.kill(daemon_pids()["slurmctld"], signal.SIGKILL)
    cli("down", "--dir", str(DIR), "-q")
    for pid in steps + job_procs + list(daemon_pids().values()):
        assert not procs.is_alive(pid), f"pid {pid} ({procs.proc_comm(pid)}) survived down"


def test_down_stops_a_job_process_that_left_its_process_tree(contract_cluster):
    # proctrack/linuxproc follows the process tree: a setsid child is re-parented
    # to init, and scancel never reaches it (such a training process once outlived
    # its test cluster); down finds it by its environment
    up()
    env = dict(os.environ, SLURM_CONF=str(DIR / "etc" / "slurm.conf"))
    mark = DIR / "jobs" / "escaped.pid"
    mark.unlink(missing_ok=True)
    subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-G",
            "1",
            f"--chdir={DIR}/jobs",
            "--wrap",
            f"(setsid sleep 301 < /dev/null > /dev/null 2>&1 & echo $! > {mark}); sleep 300",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert procs.wait_until(lambda: mark.exists() and mark.read_text().strip(), 20), "the job never started"
    escaped = int(mark.read_text())
    assert procs.is_alive(escaped) and escaped not in [
        p for s in procs.pids_with_cwd_under("slurmstepd", DIR) for p in procs.descendants(s)
    ]
    r = cli("down", "--dir", str(DIR), "--json")
    assert not procs.is_alive(escaped), "the escaped job process survived down"
    assert f"job process({escaped})" in json.loads(r.stdout)["stopped"]


def test_status_reports_a_drained_node_and_up_resumes_it(contract_cluster):
    up()
    env = dict(os.environ, SLURM_CONF=str(DIR / "etc" / "slurm.conf"))
    subprocess.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=test"], env=env, check=True)
    r = cli("status", "--dir", str(DIR), "--json", check=False)
    st = json.loads(r.stdout)
    assert r.returncode == 1 and st["running"] and not st["ready"] and st["nodes"]["node2"] == "drain"
    again = up()
    assert again["started"] == []
    assert cli("status", "--dir", str(DIR), "--json").returncode == 0
