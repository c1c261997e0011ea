"""End to end on the real Slurm with accounting: run GPU jobs, read them back
with the real sacct (slurmdbd + MariaDB started by `cluster up --accounting`),
convert with `teiresias trace from-sacct`, replay with `teiresias simulate`,
and check that the FIFO replay reproduces the real run.

The cluster is its own (DIR-acct, PORT_BASE+10 .. +14, 2 nodes x 4 GPUs,
one partition): accounting costs ~20 s of packages and a MariaDB, which the
shared test cluster does not carry.

Why FIFO should match: Slurm here is backfill with basic priority, i.e.
FIFO with head-of-line blocking per partition. Every job has a 1-minute time
limit, so backfill sees that no later job could finish before the blocked
head's reserved start and never lets one jump it: the same rule as the
simulator's `fifo`. The workload (submitted together, in this order):

    A 4 GPUs 10 s, B 4 GPUs 6 s                 start at once       (wave 0)
    C 8 GPUs on 2 nodes 5 s                     waits for A and B   (wave 1)
    D 2 GPUs 6 s, E 1 GPU 4 s, F 4 GPUs 5 s     wait behind C (FIFO: D, E, F
                                                 would fit after B ends)   (wave 2)

Tolerance, per job: the replay's JCT is at most 1 s longer than the real
one, and shorter by at most 5 s + 3 s x wave. The trace holds what sacct
recorded (whole seconds; Elapsed as run time), and the replay starts a job
the instant GPUs free up, so the difference is Slurm's own start delays
along the chain of jobs a job waited for: after submission up to 3 s
(batch_sched_delay, 3 s by default, lets Slurm defer scheduling newly
submitted batch jobs; measured 2-3 s here), after the job it waited for
ended about 1 s (measured); each plus 1 s of timestamp truncation and 1 s
for a machine busy with other tests. Measured: the replay 2-5 s short.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_plugin.localcluster import ClusterConfig, LocalCluster, client_env, procs
from slurm_plugin.localcluster.config import render_slurm_conf, rendered_files
from teiresias.errors import ConfigError
from teiresias.simulator.sacct import SACCT_PARSABLE_FIELDS
from tests.helpers import poll
from tests.slurm.conftest import test_cluster_config

pytestmark = pytest.mark.slurm

TEIRESIAS = [sys.executable, "-m", "teiresias"]
# name -> (GPUs, sbatch shape, seconds, wave)
WORKLOAD = {
    "A": (4, ["-G", "4"], 10, 0),
    "B": (4, ["-G", "4"], 6, 0),
    "C": (8, ["-N", "2", "--gpus-per-node=4"], 5, 1),
    "D": (2, ["-G", "2"], 6, 2),
    "E": (1, ["-G", "1"], 4, 2),
    "F": (4, ["-G", "4"], 5, 2),
}
FIRST_START_S, LATER_START_S = 5.0, 3.0
# What the docs ask for (docs/simulator.md), the time limit included as --json has it.
FIELDS = SACCT_PARSABLE_FIELDS


def acct_config() -> ClusterConfig:
    base = test_cluster_config()
    return ClusterConfig(
        dir=Path(f"{base.dir}-acct"),
        nodes=2,
        gpus_per_node=4,
        port_base=base.port_base + 10,
        partitions=("gpu",),
        accounting=True,
    )


@pytest.fixture(scope="module")
def acct_cluster():
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd runs as root, fake GPUs need mknod)")
    cluster = LocalCluster(acct_config())
    cluster.up()
    try:
        yield cluster
    finally:
        if os.environ.get("TEIRESIAS_TEST_CLUSTER_KEEP") != "1":
            cluster.down()


def _run(cmd: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False, **kw)


def test_default_test_cluster_has_no_accounting():
    # the shared fixture's cluster must not pay for slurmdbd + MariaDB
    cfg = test_cluster_config()
    assert not cfg.accounting
    assert "AccountingStorageType=accounting_storage/none" in render_slurm_conf(cfg)


def test_accounting_configuration_ports_and_files(tmp_path):
    cfg = ClusterConfig(dir=tmp_path, nodes=2, gpus_per_node=4, port_base=21000, accounting=True)
    assert (cfg.dbd_port, cfg.mysql_port) == (21003, 21004)  # after slurmctld and the 2 nodes
    conf = render_slurm_conf(cfg)
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "AccountingStoragePort=21003" in conf and f"AccountingStoragePass={cfg.munge_socket}" in conf
    files = rendered_files(cfg, "pw0")
    assert "StoragePort=21004" in files["slurmdbd.conf"] and "StoragePass=pw0" in files["slurmdbd.conf"]
    assert "slurmdbd.conf" not in rendered_files(ClusterConfig(dir=tmp_path, nodes=2))
    # two more ports must fit below 65536
    ClusterConfig(dir=tmp_path, nodes=2, port_base=65535 - 3)
    with pytest.raises(ConfigError, match="room for 5 ports"):
        ClusterConfig(dir=tmp_path, nodes=2, port_base=65535 - 3, accounting=True)


def test_fifo_replay_of_the_converted_sacct_matches_the_real_run(acct_cluster, tmp_path):
    env = client_env(acct_cluster.cfg.conf)
    assert acct_cluster.status().accounting, "sacct does not reach slurmdbd"
    jobs_dir = acct_cluster.cfg.dir / "jobs"
    ids: dict[str, int] = {}
    for name, (_, shape, seconds, _) in WORKLOAD.items():
        r = _run(
            [
                "sbatch",
                "--parsable",
                "-J",
                name,
                "-t",
                "1",
                f"--chdir={jobs_dir}",
                f"--output={jobs_dir}/slurm-%j.out",
                *shape,
                "--wrap",
                f"sleep {seconds}",
            ],
            env,
        )
        assert r.returncode == 0, r.stderr
        ids[name] = int(r.stdout.strip().split(";")[0])
    id_list = ",".join(str(i) for i in ids.values())

    def all_recorded() -> bool:
        # slurmdbd gets the end records asynchronously: poll until every job is there, finished
        r = _run(["sacct", "-a", "-X", "-n", "-j", id_list, "--parsable2", "-o", "JobIDRaw,State,End"], env)
        recs = [line.split("|") for line in r.stdout.splitlines() if line.strip()]
        return len(recs) == len(ids) and all(s == "COMPLETED" and e != "Unknown" for _, s, e in recs)

    poll("every job COMPLETED in sacct", all_recorded, timeout=120, every=1.0)

    acct_json = tmp_path / "acct.json"
    r = _run(["sacct", "-a", "-j", id_list, "--json"], env)
    assert r.returncode == 0, r.stderr
    acct_json.write_text(r.stdout)
    acct_txt = tmp_path / "acct.txt"
    r = _run(["sacct", "-a", "-X", "-D", "-j", id_list, "--parsable2", "-o", FIELDS], env)
    assert r.returncode == 0, r.stderr
    acct_txt.write_text(r.stdout)

    trace, trace2 = tmp_path / "trace.csv", tmp_path / "trace2.csv"
    samples = tmp_path / "gput.csv"
    r = _run([*TEIRESIAS, "trace", "from-sacct", str(acct_json), "-o", str(trace), "-S", str(samples), "--json"], env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"] == len(WORKLOAD)
    r = _run([*TEIRESIAS, "trace", "from-sacct", str(acct_txt), "-o", str(trace2)], env)
    assert r.returncode == 0, r.stderr
    assert trace.read_text() == trace2.read_text(), "--json and --parsable2 give different traces"

    name_of = {v: k for k, v in ids.items()}
    rows = {name_of[int(row["job_id"])]: row for row in csv.DictReader(trace.open())}
    for name, (gpus, _, seconds, _) in WORKLOAD.items():
        assert int(rows[name]["num_gpu"]) == gpus, rows[name]
        assert rows[name]["model_name"] == name
        # Elapsed counts whole seconds from start to end of `sleep N`
        assert seconds <= float(rows[name]["duration"]) <= seconds + 1, rows[name]

    spec = tmp_path / "cluster.yaml"
    spec.write_text("gpus_per_node: 4\nswitches:\n  - name: s0\n    nodes: [node1, node2]\n")
    jobs_csv = tmp_path / "jobs.csv"
    # the admin's question: fifo (what Slurm did) beside las and gittins (on the site's own GPU-times)
    r = _run(
        [
            *TEIRESIAS,
            "simulate",
            "-t",
            str(trace),
            "-c",
            str(spec),
            "-p",
            "fifo,las,gittins",
            "-g",
            str(samples),
            "--interval",
            "0",
            "--jobs-csv",
            str(jobs_csv),
            "--no-progress",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    sim = {(row["policy"], name_of[int(row["job_id"])]): row for row in csv.DictReader(jobs_csv.open())}
    assert {p for p, _ in sim} == {"fifo", "las", "gittins"}

    real = {}
    for job in json.loads(acct_json.read_text())["jobs"]:
        t = job["time"]
        real[name_of[job["job_id"]]] = (t["submission"], t["start"], t["end"])
    t0 = min(s for s, _, _ in real.values())

    # the replay's waves are the designed ones, and the real run had the same
    for name, (_, _, _, wave) in WORKLOAD.items():
        sim_wait = float(sim["fifo", name]["start"]) - float(sim["fifo", name]["submit"])
        assert (sim_wait > 0) == (wave > 0), (name, sim["fifo", name])
    for later in WORKLOAD:
        for earlier in WORKLOAD:
            if WORKLOAD[later][3] == WORKLOAD[earlier][3] + 1:
                assert real[later][1] >= real[earlier][2], f"{later} started before {earlier} ended: {real}"

    report = []
    for name, (_, _, _, wave) in WORKLOAD.items():
        real_jct = real[name][2] - real[name][0]
        sim_jct = float(sim["fifo", name]["jct"])
        report.append(f"{name}: real {real_jct:.0f} s (start +{real[name][1] - t0}), replay {sim_jct:.0f} s")
        assert -1 <= real_jct - sim_jct <= FIRST_START_S + LATER_START_S * wave, "; ".join(report)
    print("\n".join(report))  # pytest -s: how close the replay came


def test_accounting_cluster_cli_idempotent_status_and_down_stops_everything(acct_cluster):
    """Runs last in this module: `cluster up --accounting` again starts nothing,
    status says sacct answers, and down stops slurmdbd and MariaDB too."""
    cfg = acct_cluster.cfg
    env = client_env(cfg.conf)
    where = ["--dir", str(cfg.dir)]
    r = _run(
        [
            *TEIRESIAS,
            "cluster",
            "up",
            "--accounting",
            "-n",
            "2",
            "-g",
            "4",
            "--partitions",
            "gpu",
            "-p",
            str(cfg.port_base),
            *where,
            "--json",
            "-q",
        ],
        env,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["started"] == [] and res["accounting"] is True, res
    r = _run([*TEIRESIAS, "cluster", "status", *where, "--json"], env)
    st = json.loads(r.stdout)
    assert r.returncode == 0 and st["accounting"] is True, st
    pids = {p["name"]: p["pid"] for p in st["processes"] if p["alive"]}
    assert {"slurmdbd", "mariadbd", "munged", "slurmctld"} <= set(pids), st["processes"]
    r = _run([*TEIRESIAS, "cluster", "down", *where, "--json"], env)
    assert r.returncode == 0, r.stderr
    stopped = " ".join(json.loads(r.stdout)["stopped"])
    assert "slurmdbd" in stopped and "mariadbd" in stopped, stopped
    assert not [name for name, pid in pids.items() if procs.is_alive(pid)], "processes left after down"
