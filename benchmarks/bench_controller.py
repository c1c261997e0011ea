#!/usr/bin/env python3
"""Controller round time on synthetic Slurm snapshots (prints figures; no thresholds).

A round = parse ``squeue --json`` + ``sinfo --json`` -> finish journal ->
reconcile with the state DB -> policy.decide -> plan bookkeeping (state DB
writes, one transaction). Enacting (scontrol calls) is excluded: the round
runs with ``dry_run`` so nothing is sent to Slurm.

The documents are built from ones captured on the local cluster
(tests/fixtures/slurm/squeue_mixed.json, sinfo_mixed.json): one RUNNING and
one held PENDING job are cloned N times, the node cloned to 256 nodes of 8
GPUs. Running jobs fill every GPU; the rest wait (held), as in a busy cluster.
Goal of issue 3: <= 100 ms for 1,000 jobs, <= 1 s for 10,000.

    .venv/bin/python benchmarks/bench_controller.py [--jobs 1000 10000] [--rounds 5] [--policy las]
        [--poll json|scontrol]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install

from slurm_plugin.backends.parse import parse_sinfo_json, parse_squeue_json  # noqa: E402
from slurm_plugin.config import parse_config  # noqa: E402
from slurm_plugin.controller.audit import AuditLog  # noqa: E402
from slurm_plugin.controller.loop import Controller  # noqa: E402
from slurm_plugin.controller.state import StateStore  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurm"
NODES, GPUS = 256, 8


def documents(n_jobs: int, seed: int = 1) -> tuple[str, str]:
    """(squeue --json, sinfo --json) text for ``n_jobs`` jobs on 256 x 8 GPUs."""
    rng = random.Random(seed)
    sq = json.loads((FIX / "squeue_mixed.json").read_text())
    si = json.loads((FIX / "sinfo_mixed.json").read_text())
    run_t = next(j for j in sq["jobs"] if j["job_state"] == "RUNNING")
    pend_t = next(j for j in sq["jobs"] if j["job_state"] == "PENDING" and j["state_reason"] == "JobHeldUser")
    node_t = si["nodes"][0]
    now = int(time.time())
    jobs, used = [], [0] * NODES
    node = 0
    for i in range(1, n_jobs + 1):
        g = rng.choice([1, 1, 1, 2, 2, 4, 8])
        while node < NODES and used[node] + g > GPUS:
            node += 1
        if node < NODES:
            j = copy.deepcopy(run_t)
            used[node] += g
            j.update(
                job_state="RUNNING",
                nodes=f"node{node + 1}",
                node_count=1,
                required_nodes=f"node{node + 1}",
                gres_detail=[f"gpu:{g}(IDX:0-{g - 1})"],
                tres_per_node="",
                tres_per_job=f"gres:gpu:{g}",
                start_time=now - rng.randint(10, 20000),
            )
        else:
            j = copy.deepcopy(pend_t)
            j.update(tres_per_job=f"gres:gpu:{g}", tres_per_node="", gres_detail=[], nodes="")
        j.update(
            job_id=i,
            name=f"job{i}",
            partition="gpu",
            submit_time=now - rng.randint(30000, 40000),
            restart_cnt=0,
            comment="",
        )
        jobs.append(j)
    sq["jobs"] = jobs
    nodes = []
    for k in range(NODES):
        n = copy.deepcopy(node_t)
        n.update(
            name=f"node{k + 1}",
            gres=f"gpu:{GPUS}",
            gres_used=f"gpu:{used[k]}",
            partitions=["gpu"],
            state="mixed" if used[k] else "idle",
        )
        nodes.append(n)
    si["nodes"] = nodes
    return json.dumps(sq), json.dumps(si)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def scontrol_text(squeue_doc: str) -> str:
    """The same jobs as ``scontrol show job -o`` lines (the CLI backend's faster poll),
    built from the captured lines of a running and a pending job."""
    import re

    lines = (FIX / "scontrol_show_job.txt").read_text().splitlines()
    run_t = next(ln for ln in lines if "JobState=RUNNING" in ln and "NumNodes=1 " in ln)
    pend_t = next(ln for ln in lines if "JobState=PENDING" in ln and "TresPerJob=" in ln)
    out = []
    for j in json.loads(squeue_doc)["jobs"]:
        g = int(j["tres_per_job"].rsplit(":", 1)[1])
        if j["job_state"] == "RUNNING":
            ln = re.sub(r"NodeList=\S+", f"NodeList={j['nodes']}", run_t)
            ln = re.sub(r"TresPerNode=\S+", f"TresPerNode=gres:gpu:{g}", ln)
        else:
            ln = re.sub(r"TresPerJob=\S+", f"TresPerJob=gres:gpu:{g}", pend_t)
            ln = re.sub(r"Priority=\d+", "Priority=0", ln)
            ln = re.sub(r"Reason=\S+", "Reason=JobHeldUser", ln)
        ln = re.sub(r"SubmitTime=\S+", f"SubmitTime={_stamp(j['submit_time'])}", ln)
        if j["job_state"] == "RUNNING":
            ln = re.sub(r"StartTime=\S+", f"StartTime={_stamp(j['start_time'])}", ln)
        ln = re.sub(r"JobId=\d+", f"JobId={j['job_id']}", ln)
        ln = re.sub(r"Partition=\S+", "Partition=gpu", ln)
        out.append(ln)
    return "\n".join(out) + "\n"


class _NoSlurm:
    """No Slurm: the rounds get its data injected and, as a dry run, act on nothing. The
    one read a round makes (a running job's batch script, to tell whether it checkpoints
    itself: minimum run times) answers a plain script, once per job."""

    def batch_script(self, job_id: object) -> str:
        return "#!/bin/sh\n"


def bench(n_jobs: int, rounds: int, policy: str, poll: str = "json") -> dict[str, float]:
    sq, si = documents(n_jobs)
    if poll == "scontrol":
        from slurm_plugin.backends.parse import parse_scontrol_jobs

        text = scontrol_text(sq)
        parse_jobs = lambda: parse_scontrol_jobs(text)  # noqa: E731
    else:
        parse_jobs = lambda: parse_squeue_json(sq)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(
            {"state_db": f"{tmp}/state.db", "policy": {"name": policy, "queues": [3600]}, "partitions": ["gpu"]}
        )
        store = StateStore(cfg.state_db)
        ctl = Controller(cfg, _NoSlurm(), store, AuditLog(None), dry_run=True)  # type: ignore[arg-type]
        times: list[dict[str, float]] = []
        for _ in range(rounds + 1):  # round 0 creates the records (cold); the others are steady state
            t0 = time.perf_counter()
            jobs, nodes = parse_jobs(), parse_sinfo_json(si)
            t1 = time.perf_counter()
            res = ctl.round(slurm_jobs=jobs, slurm_nodes=nodes)
            t2 = time.perf_counter()
            times.append(
                {
                    "parse": t1 - t0,
                    "reconcile": res.timings["reconcile_s"],
                    "policy": res.timings["policy_s"],
                    "plan": res.timings["enact_s"],
                    "total": t2 - t0,
                }
            )
        store.close()
    steady = times[1:]
    out = {k: statistics.median(t[k] for t in steady) for k in steady[0]}
    out["cold_total"] = times[0]["total"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy", default="las")
    ap.add_argument(
        "--poll",
        choices=["json", "scontrol"],
        default="json",
        help="which Slurm output the round parses (config slurm_poll)",
    )
    a = ap.parse_args()
    print(
        f"controller round, {NODES} nodes x {GPUS} GPUs, policy {a.policy}, poll {a.poll}, "
        f"median of {a.rounds} steady rounds (ms)"
    )
    print(f"{'jobs':>7} {'parse':>8} {'reconcile':>10} {'policy':>8} {'plan+db':>8} {'total':>8} {'cold':>8}  goal")
    for n in a.jobs:
        r = bench(n, a.rounds, a.policy, a.poll)
        goal = 100 if n <= 1000 else 1000
        print(
            f"{n:>7} {r['parse'] * 1e3:8.1f} {r['reconcile'] * 1e3:10.1f} {r['policy'] * 1e3:8.1f} "
            f"{r['plan'] * 1e3:8.1f} {r['total'] * 1e3:8.1f} {r['cold_total'] * 1e3:8.1f}  <= {goal} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
