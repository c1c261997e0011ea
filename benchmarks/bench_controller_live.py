#!/usr/bin/env python3
"""The controller as it runs, and `teiresias queue` / `explain`, under N real queued jobs
(issue 24 B), this checkout side by side with an older one (default cb951f8).

    .venv/bin/python benchmarks/bench_controller_live.py [--jobs 1000] [--rounds 12] [--repeat 8]
        [--compare cb951f8] [--dir /var/tmp/teiresias-bench-ctl] [--port-base 17400] [--keep]

It starts its own local cluster (4 nodes x 4 GPUs, etc/job_submit.lua: every job of
partition gpu is held for the controller), submits N ``sleep`` jobs (1-4 GPUs; a
tenth of them in ten arrays of tasks with a %4 throttle; some with -x), lets the
controller of this checkout start what fits, then measures alternately (A B A B):

- rounds: ``Controller.round()`` of each tree in a process of its own (its real
  poll, reconcile, policy, bookkeeping and enacting; the first two rounds of a
  process, which read everything once, are left out), per tree its poll setting
  (the older tree: squeue --json; this one: its default, and ``slurm_poll: json``
  for the share of the poll);
- ``teiresias queue`` and ``teiresias explain`` of a waiting job as commands (Python
  start-up and imports included; bytecode cached), wall and CPU time (the command's
  and its children's, which a busy machine inflates less than wall time);
- ``squeue`` (default format) and ``python -c pass`` for reference.

The older tree is extracted with ``git archive`` into a temporary folder and run with
PYTHONPATH and the working folder set to it. Prints a table; --json prints figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without install

from slurm_plugin.backends.cli import CliBackend  # noqa: E402
from slurm_plugin.localcluster import ClusterConfig, LocalCluster  # noqa: E402

# The rounds of one tree, run in a child process with that tree first on the path.
ROUNDS = """
import json, sys, time
from slurm_plugin.config import load_config
from slurm_plugin.controller.runtime import make_controller
ctl = make_controller(load_config(sys.argv[1]))
for i in range(int(sys.argv[2])):
    t = time.perf_counter()
    r = ctl.round()
    wall = time.perf_counter() - t
    print(json.dumps({"wall": wall, "jobs": r.jobs, "actions": len(r.actions), **r.timings}), flush=True)
    time.sleep(float(sys.argv[3]))
"""


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1000, 1),
        "p95_ms": round(xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))] * 1000, 1),
        "n": len(xs),
    }


def uptime() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def submit_jobs(backend: CliBackend, jobs_dir: Path, n: int) -> None:
    """``n`` sleeping jobs of partition gpu: a tenth of them tasks of arrays (``%4``)."""
    arrays = max(n // 100, 1) if n >= 40 else 0
    per_array = (n // 10) // arrays if arrays else 0
    plain = n - arrays * per_array
    common = ("-p", "gpu", f"--chdir={jobs_dir}", "--output=/dev/null")
    script = "#!/bin/sh\nsleep 3600\n"

    def one(i: int) -> None:
        excluded = ("-x", f"node{1 + i % 4}") if i % 25 == 0 else ()
        backend.submit(script, *common, "-J", f"bench{i}", "-G", str(1 + i % 4), *excluded)

    def array(k: int) -> None:
        backend.submit(script, *common, "-J", f"array{k}", "-G", "1", f"--array=0-{per_array - 1}%4")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(plain)))
        list(pool.map(array, range(arrays)))


def child_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def run_rounds(tree: Path, config: Path, rounds: int, pause: float, env: dict[str, str]) -> list[dict[str, float]]:
    r = subprocess.run(
        [sys.executable, "-c", ROUNDS, str(config), str(rounds), str(pause)],
        cwd=tree,
        env=child_env(tree) | {"SLURM_CONF": env["SLURM_CONF"]},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if r.returncode != 0:
        raise SystemExit(f"rounds of {tree} failed: {r.stderr.strip().splitlines()[-1:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def timed_command(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    c0, t0 = children_cpu(), time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}: {r.stderr.strip()[-300:]}")
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--jobs", type=int, default=1000, help="jobs submitted (default 1000)")
    ap.add_argument("-r", "--rounds", type=int, default=12, help="rounds per process, 2 left out (default 12)")
    ap.add_argument("--repeat", type=int, default=8, help="queue/explain runs per tree and turn (default 8)")
    ap.add_argument("--turns", type=int, default=2, help="A B turns (default 2)")
    ap.add_argument("--compare", default="cb951f8", help="the older commit (default cb951f8)")
    ap.add_argument("--dir", default="/var/tmp/teiresias-bench-ctl")
    ap.add_argument("--port-base", type=int, default=17400)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    base = Path(args.dir)
    cluster = LocalCluster(
        ClusterConfig(dir=base, port_base=args.port_base, job_submit_lua=REPO / "etc" / "job_submit.lua")
    )
    cluster.down()  # a fresh queue and state
    shutil.rmtree(base / "state", ignore_errors=True)
    shutil.rmtree(base / "ctl", ignore_errors=True)
    cluster.up()
    env = dict(cluster.env)
    backend = CliBackend(env=env, timeout=120)
    old_tree = Path(tempfile.mkdtemp(prefix="teiresias-old-"))
    fig: dict[str, object] = {"jobs": args.jobs, "compare": args.compare, "load_start": uptime()}
    try:
        archive = subprocess.run(["git", "archive", args.compare], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True)
        ctl_dir = base / "ctl"
        ctl_dir.mkdir(parents=True)
        common = (
            "partitions: [gpu]\npolicy: {name: las, queues: [3600]}\nbackend: cli\n"
            f"slurm_conf: {cluster.cfg.conf}\nstate_db: {ctl_dir}/state.db\naudit_log: {ctl_dir}/audit.jsonl\n"
            f"spool_dir: {ctl_dir}/spool\n"
        )
        configs = {"new": ctl_dir / "new.yaml", "new_json": ctl_dir / "new_json.yaml", "old": ctl_dir / "old.yaml"}
        configs["new"].write_text(common)
        configs["old"].write_text(common)
        configs["new_json"].write_text(common + "slurm_poll: json\n")
        trees = {"new": REPO, "new_json": REPO, "old": old_tree}

        t0 = time.perf_counter()
        cancel_all = cluster.cancel_all_jobs
        cancel_all(timeout=120)
        submit_jobs(backend, cluster.cfg.dir / "jobs", args.jobs)
        fig["submit_s"] = round(time.perf_counter() - t0, 1)
        # Warm-up: this checkout's controller starts what fits and splits the arrays.
        run_rounds(REPO, configs["new"], 4, 1.0, env)
        waiting = next(j.job_id for j in backend.jobs() if j.state == "PENDING" and j.partition == "gpu" and j.gpus > 1)

        rounds: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for _ in range(args.turns):
            for name in ("old", "new", "new_json"):
                rounds[name] += run_rounds(trees[name], configs[name], args.rounds, 0.5, env)[2:]
        fig["rounds"] = {
            name: {
                "jobs": rs[-1]["jobs"],
                "round": stats([r["total_s"] for r in rs]),
                "poll": stats([r["poll_s"] for r in rs]),
                "reconcile": stats([r["reconcile_s"] for r in rs]),
                "policy": stats([r["policy_s"] for r in rs]),
                "enact": stats([r["enact_s"] for r in rs]),
            }
            for name, rs in rounds.items()
        }

        py = [sys.executable]
        cmds = {
            "python -c pass": (py + ["-c", "pass"], REPO),
            "squeue": (["squeue"], REPO),
        }
        for name in ("old", "new"):
            tree = trees[name]
            cfg = str(configs[name])
            cmds[f"queue {name}"] = (py + ["-m", "teiresias", "queue", "-c", cfg], tree)
            cmds[f"explain {name}"] = (py + ["-m", "teiresias", "explain", str(waiting), "-c", cfg], tree)
        for cmd, cwd in cmds.values():  # bytecode written, caches warm
            timed_command(cmd, cwd, child_env(cwd) | {"SLURM_CONF": env["SLURM_CONF"]})
        walls: dict[str, list[float]] = {k: [] for k in cmds}
        cpus: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.turns):
            for _ in range(args.repeat):
                for key, (cmd, cwd) in cmds.items():
                    w, c = timed_command(cmd, cwd, child_env(cwd) | {"SLURM_CONF": env["SLURM_CONF"]})
                    walls[key].append(w)
                    cpus[key].append(c)
        fig["commands"] = {
            k: {**stats(walls[k]), "cpu_median_ms": round(statistics.median(cpus[k]) * 1000, 1)} for k in cmds
        }
        fig["load_end"] = uptime()
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)
        cluster.cancel_all_jobs(timeout=180)
        if not args.keep:
            cluster.down()
    if args.json:
        print(json.dumps(fig))
        return 0
    rs = fig["rounds"]
    assert isinstance(rs, dict)
    print(
        f"controller rounds, {rs['new']['jobs']} active jobs on 4 x 4 GPUs, las; load {fig['load_start']} -> "
        f"{fig['load_end']}; median / p95 ms of {rs['new']['round']['n']} rounds per tree"
    )
    print(f"{'':24}{'round':>16}{'poll':>16}{'reconcile':>12}{'policy':>9}{'enact':>9}")
    for name, label in (("old", f"{args.compare} (json)"), ("new_json", "this, slurm_poll: json"), ("new", "this")):
        r = rs[name]
        print(
            f"{label:24}{r['round']['median_ms']:>8.0f} /{r['round']['p95_ms']:>6.0f}"
            f"{r['poll']['median_ms']:>8.0f} /{r['poll']['p95_ms']:>6.0f}"
            f"{r['reconcile']['median_ms']:>12.0f}{r['policy']['median_ms']:>9.0f}{r['enact']['median_ms']:>9.0f}"
        )
    cs = fig["commands"]
    assert isinstance(cs, dict)
    print(f"commands ({args.turns * args.repeat} runs each, alternating): wall median / p95, CPU median (ms)")
    for k, c in cs.items():
        print(f"  {k:18} {c['median_ms']:>7.0f} / {c['p95_ms']:>6.0f}   cpu {c['cpu_median_ms']:>6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
