"""`teiresias demo`: local Slurm cluster + controller + a mixed workload, live queue, JCTs vs the simulator."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
import yaml

from slurm_plugin.config import load_config, parse_config
from slurm_plugin.controller.accounting import total_executed
from slurm_plugin.controller.demo import DEMO_JOB, DemoJob, demo_cluster, run_overhead, simulate, workload
from slurm_plugin.controller.state import Phase, StateStore
from slurm_plugin.controller.view import build_rows, format_table
from teiresias.errors import ConfigError, TeiresiasError
from teiresias.jobfiles import format_comment
from teiresias.policy.registry import POLICY_NAMES

LUA = Path(__file__).resolve().parents[2] / "etc" / "job_submit.lua"
DEFAULT_DEMO_DIR = "/var/tmp/teiresias-demo"
DEFAULT_DEMO_PORT = 17200


class DemoError(TeiresiasError):
    """The demo could not run to its end (message says where to look)."""


def _controller_config(d: Path, conf: Path, policy: str, queues: list[float], poll: float) -> dict[str, Any]:
    ctl = d / "controller"
    return {
        "partitions": ["gpu"],
        "policy": {"name": policy, "queues": queues},
        "placement": "consolidate",
        "poll_interval": poll,
        # min_run_seconds 0: the paper's rule, as in the simulator it is compared with.
        "preemption": {"grace_seconds": 10, "start_timeout_seconds": 20, "min_run_seconds": 0},
        "state_db": str(ctl / "state.db"),
        "audit_log": str(ctl / "audit.jsonl"),
        "backend": "cli",
        "slurm_conf": str(conf),
    }


def _write_controller_config(d: Path, data: dict[str, Any]) -> Path:
    ctl = d / "controller"
    if ctl.exists():
        shutil.rmtree(ctl)  # each demo starts with fresh controller state
    ctl.mkdir(parents=True)
    path = ctl / "teiresias.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _run_controller(ctl: Any, stop: threading.Event) -> None:
    # A failure goes to the controller log; the main loop sees the thread gone and
    # reports it in one line (an unhandled exception would print a thread traceback).
    try:
        ctl.run(stop)
    except Exception:
        logging.getLogger("teiresias").exception("controller stopped")


TRAIN = Path(__file__).resolve().parents[1] / "controller" / "demo_train.py"


def _submit_pytorch(conf: Path, job: DemoJob, jobs_dir: Path, base: Path) -> int:
    """A real PyTorch job through tsbatch: its hooks checkpoint on the controller's USR1."""
    script = jobs_dir / "demo_train.sh"
    if not script.exists():
        script.write_text(f"#!/bin/bash\nexec {sys.executable} {TRAIN}\n")
    tsbatch = Path(sys.executable).with_name("tsbatch")
    cmd = [str(tsbatch)] if tsbatch.exists() else [sys.executable, "-m", "teiresias", "sbatch"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SLURM_CONF=str(conf), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [
            *cmd,
            f"--checkpoint-dir={base}",
            *_job_args(job, jobs_dir),
            "--open-mode=append",
            f"--export=ALL,WORK={int(job.work)}",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if r.returncode != 0:
        raise DemoError(f"tsbatch failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    return int(r.stdout.strip().split()[-1])


def _job_args(job: DemoJob, jobs_dir: Path) -> list[str]:
    """The sbatch options of a demo job, a PyTorch one through tsbatch or a plain one."""
    return [
        "-p",
        "gpu",
        f"--gpus={job.gpus}",
        "-t",
        "30",
        f"--job-name=demo{job.index:02d}-{job.kind}",
        f"--chdir={jobs_dir}",
        f"--output={jobs_dir}/demo-%j.out",
    ]


def _submit(backend: Any, job: DemoJob, jobs_dir: Path, base: Path) -> int:
    return backend.submit(
        DEMO_JOB,
        *_job_args(job, jobs_dir),
        f"--comment={format_comment({'dir': str(base)})}",
        f"--export=ALL,JOBBASE={base},WORK={int(job.work)}",
    )


def _status_line(rows: list, elapsed: float, submitted: int, total: int) -> str:
    running = [r for r in rows if r.state in (Phase.RUNNING.value, Phase.PREEMPTING.value)]
    pending = [r for r in rows if r.state in (Phase.PENDING.value, Phase.STARTING.value)]
    done = [r for r in rows if r.state == Phase.FINISHED.value]
    gpus = sum(r.gpus for r in running)
    return (
        f"[{elapsed:5.0f}s] submitted {submitted}/{total}  running {len(running)} ({gpus} GPUs)  "
        f"waiting {len(pending)}  finished {len(done)}  preemptions {sum(r.preemptions for r in rows)}"
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-d",
    "--dir",
    "directory",
    default=DEFAULT_DEMO_DIR,
    show_default=True,
    envvar="TEIRESIAS_CLUSTER_DIR",
    show_envvar=True,
    help="Directory of the demo's local cluster and controller state (as for `teiresias cluster`).",
)
@click.option(
    "-P",
    "--port-base",
    default=DEFAULT_DEMO_PORT,
    show_default=True,
    type=int,
    envvar="TEIRESIAS_CLUSTER_PORT_BASE",
    show_envvar=True,
    help="slurmctld port of the demo cluster (node i on +i).",
)
@click.option(
    "-p",
    "--policy",
    default="las",
    show_default=True,
    type=click.Choice(POLICY_NAMES),
    help="Policy the live controller runs.",
)
@click.option(
    "-s",
    "--scale",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.05, 10.0),
    help="Scale job lengths and arrival times (0.3 for a quick run).",
)
@click.option(
    "-w",
    "--workload",
    "kind",
    type=click.Choice(["sleep", "pytorch"]),
    default="pytorch",
    show_default=True,
    help="Jobs: checkpointing sleep jobs, or real PyTorch jobs through tsbatch.",
)
@click.option("-k", "--keep", is_flag=True, help="Leave the cluster running at the end.")
@click.option("--no-live", is_flag=True, help="No live table; a status line every 10 s.")
@click.option("--timeout", default=600.0, show_default=True, type=float, help="Give up after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print the final report as JSON.")
def demo(
    directory: str,
    port_base: int,
    policy: str,
    scale: float,
    kind: str,
    keep: bool,
    no_live: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Start a local Slurm cluster (4 nodes x 4 fake GPUs) and the teiresias
    controller, run a mixed workload (short and long, 1-8 GPU PyTorch training
    jobs submitted with tsbatch, which checkpoint on preemption), show the
    queue live, and end with each job's JCT next to what `fifo` and `las` give
    in the simulator on the same jobs (charged the start-up/restore cost per
    run measured live).

    Stops the cluster it started unless --keep, also when interrupted (Ctrl-C,
    SIGTERM: exit 130 / 143). About 3 minutes at --scale 1. Every option and
    the controller's configuration are checked before the cluster starts: bad
    input exits 2 with nothing started (--dir must be in an existing folder).

    \b
    Examples:
      teiresias demo
      teiresias demo --scale 0.3 --no-live --json
      teiresias demo --workload sleep     # checkpointing sleep jobs, no torch
    """
    from slurm_plugin.backends.cli import CliBackend
    from slurm_plugin.controller.loop import default_policy
    from slurm_plugin.controller.runtime import make_controller
    from slurm_plugin.localcluster import ClusterConfig, LocalCluster

    say = (lambda msg: click.echo(msg, err=True)) if as_json else click.echo
    d = Path(directory).expanduser().resolve()
    if d.exists() and not d.is_dir():
        raise ConfigError(
            f"--dir {d}: exists and is not a directory; choose another path (or unset TEIRESIAS_CLUSTER_DIR)"
        )
    if not d.parent.is_dir():
        # The demo makes its own folder, not a tree of them: a typo must not grow one (issue 21 item 8).
        raise ConfigError(
            f"--dir {d}: its parent folder {d.parent} does not exist; create it or choose another path"
            " (or unset TEIRESIAS_CLUSTER_DIR)"
        )
    if timeout <= 0:
        raise ConfigError(f"--timeout {timeout:g} must be > 0 seconds")
    # Everything is checked before the cluster starts (ClusterConfig validates the
    # ports, parse_config and default_policy the controller's configuration): a bad
    # policy used to surface only in the controller thread, after jobs were submitted.
    cluster = LocalCluster(
        ClusterConfig(dir=d, port_base=port_base, job_submit_lua=LUA, events=True), log=lambda m: say(f"cluster: {m}")
    )
    jobs = workload(scale)
    # Short jobs (<= 60 GPU-s) stay well inside Q1 even with start-up overheads counted.
    queues = [round(100.0 * scale, 1)]
    poll = 1.0
    ctl_data = _controller_config(d, cluster.cfg.conf, policy, queues, poll)
    # The cluster's EpilogSlurmctld pokes the controller here (docs/controller.md "Events").
    ctl_data["events"] = {"socket": str(cluster.cfg.events_socket)}
    # slurm.conf is written by cluster.up(); load_config checks it once it exists.
    before_up = {k: v for k, v in ctl_data.items() if k not in ("slurm_conf", "events")}
    default_policy(parse_config(before_up, f"{d}/controller/teiresias.yaml", d), None)

    # SIGTERM cleans up as SIGINT does (jobs, controller, the cluster this demo
    # started); by default it ended the process and left all three behind.
    signal.signal(signal.SIGTERM, _terminated)
    running_before = any(p.alive for p in cluster.status().processes)
    try:
        up = cluster.up()
    except BaseException:
        if not running_before and not keep:
            cluster.down()
        raise
    say(f"Local Slurm cluster up ({up.seconds:.1f}s): SLURM_CONF={up.conf}")
    started_cluster = bool(up.started)
    backend = CliBackend(slurm_conf=cluster.cfg.conf)
    cfg = load_config(_write_controller_config(d, ctl_data))

    # The controller runs in a thread of this process; its log goes to a file
    # so the live table stays readable.
    log = logging.getLogger("teiresias")
    handler = logging.FileHandler(d / "controller" / "controller.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    ctl = make_controller(cfg, backend=backend)
    stop = threading.Event()
    worker = threading.Thread(target=_run_controller, args=(ctl, stop), name="controller", daemon=True)

    base = d / "jobs" / "teiresias"
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o777)
    ids: dict[int, int] = {}
    failure: str | None = None
    try:
        # Nothing of an earlier demo may linger in the queue.
        cluster.cancel_all_jobs()
        worker.start()
        say(
            f"Controller running (policy {policy}, queues {queues} GPU-s, poll {poll:g}s); "
            f"submitting {len(jobs)} jobs over {jobs[-1].offset:g}s. Log: {d}/controller/controller.log"
        )
        t0 = time.time()
        live = sys.stdout.isatty() and not no_live and not as_json
        last_line = 0.0
        while True:
            elapsed = time.time() - t0
            for j in jobs:
                if j.index not in ids and elapsed >= j.offset:
                    ids[j.index] = (
                        _submit_pytorch(cluster.cfg.conf, j, d / "jobs", base)
                        if kind == "pytorch"
                        else _submit(backend, j, d / "jobs", base)
                    )
            store = StateStore(cfg.state_db, readonly_copy=True)
            recs = store.jobs(active_only=False)
            store.close()
            mine = [recs[i] for i in ids.values() if i in recs]
            rows = build_rows(mine, time.time())
            if live:
                click.echo(
                    "\x1b[H\x1b[J" + _status_line(rows, elapsed, len(ids), len(jobs)) + "\n\n" + format_table(rows),
                    nl=False,
                )
            elif elapsed - last_line >= 10:
                say(_status_line(rows, elapsed, len(ids), len(jobs)))
                last_line = elapsed
            if len(ids) == len(jobs) and len(mine) == len(jobs) and all(not r.active for r in mine):
                break
            if not worker.is_alive():
                failure = f"the controller thread stopped; see {d}/controller/controller.log"
                break
            if elapsed > timeout:
                failure = f"jobs not finished after {timeout:.0f}s; see {d}/controller/controller.log"
                break
            time.sleep(1.0)
    finally:
        stop.set()
        worker.join(30)
        ctl.store.close()
        ctl.audit.close()
        if failure is not None or not keep:
            cluster.cancel_all_jobs()
        if not keep and started_cluster:
            cluster.down()
            say("Local cluster stopped (use --keep to leave it running).")
    if failure:
        raise DemoError(failure)

    store = StateStore(cfg.state_db, readonly_copy=True)
    recs = store.jobs(active_only=False)
    store.close()
    sim_cluster = demo_cluster(cluster.cfg.node_names, cluster.cfg.gpus_per_node)
    # Live runs pay start-up and restore (torch import, checkpoint load) that the
    # simulator would not: measure it from the live accounting and charge it there too.
    overhead = run_overhead(
        [(total_executed(recs[ids[j.index]], time.time()), j.work, 1 + recs[ids[j.index]].preemptions) for j in jobs]
    )
    sims = [simulate(jobs, sim_cluster, p, tuple(queues), poll, overhead) for p in ("fifo", "las")]
    report = _report(jobs, ids, recs, sims, policy)
    report["run_overhead_s"] = round(overhead, 1)
    if as_json:
        click.echo(json.dumps(report, indent=1))
        return
    click.echo(_format_report(report))


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM: leave through the cleanup (``finally``), exit 128 + 15."""
    raise SystemExit(128 + signum)


def _report(jobs: list[DemoJob], ids: dict[int, int], recs: dict, sims: list, policy: str) -> dict[str, Any]:
    rows = []
    for j in jobs:
        r = recs[ids[j.index]]
        rows.append(
            {
                "job": j.index,
                "slurm_job_id": ids[j.index],
                "kind": j.kind,
                "gpus": j.gpus,
                "work_s": j.work,
                "state": r.final_state,
                "preemptions": r.preemptions,
                "jct_s": round((r.end_time or 0.0) - r.submit_time, 1),
                **{f"sim_{s.policy}_jct_s": round(s.jct[j.index], 1) for s in sims},
            }
        )
    avg = sum(r["jct_s"] for r in rows) / len(rows)
    return {
        "policy": policy,
        "jobs": rows,
        "avg_jct_s": round(avg, 1),
        **{f"sim_{s.policy}_avg_jct_s": round(s.avg, 1) for s in sims},
        "all_completed": all(r["state"] == "COMPLETED" for r in rows),
    }


def _format_report(rep: dict[str, Any]) -> str:
    sims = [k[4:-10] for k in rep if k.startswith("sim_") and k.endswith("_avg_jct_s")]
    head = [
        "JOB",
        "SLURMID",
        "KIND",
        "GPUS",
        "WORK",
        "STATE",
        "PREEMPT",
        f"JCT({rep['policy']},live)",
        *[f"SIM-{s}" for s in sims],
    ]
    lines = [head]
    for r in rep["jobs"]:
        lines.append(
            [
                str(r["job"]),
                str(r["slurm_job_id"]),
                r["kind"],
                str(r["gpus"]),
                f"{r['work_s']:.0f}s",
                str(r["state"]),
                str(r["preemptions"]),
                f"{r['jct_s']:.1f}s",
                *[f"{r[f'sim_{s}_jct_s']:.1f}s" for s in sims],
            ]
        )
    lines.append(
        [
            "avg",
            "",
            "",
            "",
            "",
            "",
            "",
            f"{rep['avg_jct_s']:.1f}s",
            *[f"{rep[f'sim_{s}_avg_jct_s']:.1f}s" for s in sims],
        ]
    )
    w = [max(len(x[i]) for x in lines) for i in range(len(head))]
    table = "\n".join("  ".join(c.rjust(w[i]) if i >= 3 else c.ljust(w[i]) for i, c in enumerate(row)) for row in lines)
    return (
        "\nJob completion times: live controller vs the simulator on the same jobs\n" + table + "\n"
        f"(the simulator charges each run the {rep['run_overhead_s']:.1f} s of start-up/restore measured"
        " live per run, median over jobs)\n"
    )
