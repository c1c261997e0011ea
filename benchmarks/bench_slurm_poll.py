#!/usr/bin/env python3
"""The real Slurm poll: ``squeue --json`` (+ parse) with N jobs in the queue
of the local cluster, ``sinfo --json`` beside it, and the other polls of the CLI
backend (``scontrol``; ``fields``, the controller's default) on the same jobs. Prints figures; no
thresholds (goal of issue 3: <= 100 ms for 1,000 jobs for a whole round).

    .venv/bin/python benchmarks/bench_slurm_poll.py --jobs 1000 --repeat 10

It starts its own local cluster (default /var/tmp/teiresias-bench-cluster,
ports 17300+), submits N held jobs (``sbatch -H``), polls, cancels them and
stops the cluster (``--keep`` leaves it running).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install

from slurm_plugin.backends.cli import CliBackend  # noqa: E402
from slurm_plugin.backends.parse import parse_sinfo_json, parse_squeue_json  # noqa: E402
from slurm_plugin.localcluster import ClusterConfig, LocalCluster  # noqa: E402


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median_ms": round(statistics.median(xs) * 1000, 1),
        "min_ms": round(xs[0] * 1000, 1),
        "max_ms": round(xs[-1] * 1000, 1),
    }


def synthetic_parse(n: int, repeat: int) -> dict:
    """Parse time of an ``squeue --json`` document of ``n`` jobs built by
    repeating the captured real one (tests/fixtures/slurm/squeue_mixed.json);
    no cluster needed."""
    fixture = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "slurm" / "squeue_mixed.json"
    doc = json.loads(fixture.read_text())
    base = doc["jobs"]
    doc["jobs"] = [dict(base[i % len(base)], job_id=i + 1) for i in range(n)]
    text = json.dumps(doc)
    return {
        "jobs": n,
        "bytes": len(text),
        "parse": summary(timed(lambda: parse_squeue_json(text), repeat)),
        "json_loads": summary(timed(lambda: json.loads(text), repeat)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--jobs", type=int, default=1000, help="held jobs in the queue (default 1000)")
    ap.add_argument("-r", "--repeat", type=int, default=10, help="polls per measurement (default 10)")
    ap.add_argument("--dir", default="/var/tmp/teiresias-bench-cluster")
    ap.add_argument("--port-base", type=int, default=17300)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--parse-only",
        type=int,
        metavar="N",
        help="only time parsing N synthetic jobs (from the captured fixture), no cluster",
    )
    args = ap.parse_args()
    if args.parse_only:
        fig = synthetic_parse(args.parse_only, args.repeat)
        if args.json:
            print(json.dumps(fig))
        else:
            print(
                f"parse of squeue --json with {fig['jobs']} jobs ({fig['bytes'] / 1e6:.1f} MB): "
                f"{fig['parse']['median_ms']} ms median [{fig['parse']['min_ms']}-{fig['parse']['max_ms']}], "
                f"of which json.loads {fig['json_loads']['median_ms']} ms"
            )
        return 0

    cluster = LocalCluster(ClusterConfig(dir=Path(args.dir), port_base=args.port_base))
    # a fresh queue: finished jobs of an earlier run would stay in squeue for MinJobAge
    cluster.down()
    shutil.rmtree(cluster.cfg.dir / "state", ignore_errors=True)
    t0 = time.perf_counter()
    cluster.up()
    t_up = time.perf_counter() - t0
    backend = CliBackend(env=cluster.env, timeout=120)
    try:
        cluster.cancel_all_jobs(timeout=120)
        t0 = time.perf_counter()
        jobs_dir = cluster.cfg.dir / "jobs"

        def submit(i: int) -> int:
            return backend.submit(
                "#!/bin/sh\nsleep 600\n",
                "-H",
                "-J",
                f"bench{i}",
                f"--chdir={jobs_dir}",
                "--output=/dev/null",
                "-G",
                str(1 + i % 4),
            )

        with ThreadPoolExecutor(max_workers=4) as pool:
            ids = list(pool.map(submit, range(args.jobs)))
        t_submit = time.perf_counter() - t0

        raw = {}

        def squeue() -> None:
            raw["squeue"] = backend.run("squeue", "--json")

        def sinfo() -> None:
            raw["sinfo"] = backend.run("sinfo", "--json")

        squeue_cmd = timed(squeue, args.repeat)
        squeue_parse = timed(lambda: parse_squeue_json(raw["squeue"]), args.repeat)
        json_loads = timed(lambda: json.loads(raw["squeue"]), args.repeat)
        poll_total = timed(backend.jobs, args.repeat)
        fast = CliBackend(env=cluster.env, timeout=120, poll="scontrol")
        scontrol_total = timed(fast.jobs, args.repeat)
        same = {j.job_id: j for j in fast.jobs()} == {j.job_id: j for j in backend.jobs()}
        # The controller's default poll (backends/fields.py); its first poll reads every
        # job's detail once (scontrol), the later ones only squeue -O and -o %x.
        by_fields = CliBackend(env=cluster.env, timeout=120, poll="fields")
        fields_first = timed(by_fields.jobs, 1)
        fields_total = timed(by_fields.jobs, args.repeat)
        fields_same = {j.job_id: j for j in by_fields.jobs()} == {j.job_id: j for j in backend.jobs()}
        sinfo_cmd = timed(sinfo, args.repeat)
        sinfo_parse = timed(lambda: parse_sinfo_json(raw["sinfo"]), args.repeat)
        in_output = len(parse_squeue_json(raw["squeue"]))
        fig = {
            "jobs_submitted": len(ids),
            "jobs_in_squeue_json": in_output,
            "squeue_json_bytes": len(raw["squeue"]),
            "repeat": args.repeat,
            "squeue_json_cmd": summary(squeue_cmd),
            "squeue_parse": summary(squeue_parse),
            "squeue_json_loads": summary(json_loads),
            "jobs_poll_total": summary(poll_total),
            "scontrol_poll_total": summary(scontrol_total),
            "scontrol_poll_same_jobs": same,
            "fields_poll_first": summary(fields_first),
            "fields_poll_total": summary(fields_total),
            "fields_poll_same_jobs": fields_same,
            "json_vs_fields_ratio": round(statistics.median(poll_total) / statistics.median(fields_total), 1),
            "json_vs_scontrol_ratio": round(statistics.median(poll_total) / statistics.median(scontrol_total), 1),
            "sinfo_json_cmd": summary(sinfo_cmd),
            "sinfo_parse": summary(sinfo_parse),
            "cluster_up_s": round(t_up, 2),
            "submit_s": round(t_submit, 1),
            "parse_share_of_poll": round(statistics.median(squeue_parse) / statistics.median(poll_total), 3),
        }
    finally:
        t0 = time.perf_counter()
        cluster.cancel_all_jobs(timeout=180)
        t_cancel = time.perf_counter() - t0
        if not args.keep:
            cluster.down()
    fig["cancel_s"] = round(t_cancel, 1)
    if args.json:
        print(json.dumps(fig))
        return 0
    print(
        f"Slurm poll on the local cluster (4 nodes x 4 GPUs), {fig['jobs_in_squeue_json']} jobs in "
        f"squeue --json ({fig['squeue_json_bytes'] / 1e6:.1f} MB), {args.repeat} polls each; median [min-max]"
    )
    for key, label in (
        ("squeue_json_cmd", "squeue --json (command)"),
        ("squeue_parse", "parse (pure Python)"),
        ("squeue_json_loads", "  of which json.loads"),
        ("jobs_poll_total", "CliBackend.jobs() total"),
        ("scontrol_poll_total", "jobs() with poll=scontrol"),
        ("fields_poll_first", "jobs() poll=fields, first"),
        ("fields_poll_total", "jobs() poll=fields, later"),
        ("sinfo_json_cmd", "sinfo --json (command)"),
        ("sinfo_parse", "sinfo parse"),
    ):
        s = fig[key]
        print(f"  {label:<26} {s['median_ms']:8.1f} ms  [{s['min_ms']:.1f}-{s['max_ms']:.1f}]")
    print(
        f"  poll=scontrol is {fig['json_vs_scontrol_ratio']}x faster than squeue --json "
        f"(same jobs read: {fig['scontrol_poll_same_jobs']})"
    )
    print(
        f"  poll=fields is {fig['json_vs_fields_ratio']}x faster than squeue --json "
        f"(same jobs read: {fig['fields_poll_same_jobs']})"
    )
    print(
        f"  parse is {fig['parse_share_of_poll'] * 100:.0f}% of a poll; setup: up {fig['cluster_up_s']} s, "
        f"{fig['jobs_submitted']} sbatch -H in {fig['submit_s']} s, cancel {fig['cancel_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
