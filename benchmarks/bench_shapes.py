"""Blind scheduling quality on four trace shapes, beside the Tiresias reference simulator,
and what declared time limits add (issues 25 and 24 C; docs/benchmarks.md, "Quality on four
trace shapes" and "Time limits").

Prints tables (nothing is asserted). Shapes, all with GPU-time from one half of the public
Philly samples (yarn-gput10000, shuffled with seed 0; the other half is the history gittins
learns from, so no policy sees the jobs it schedules, except srsf, the oracle), durations
capped at one day, 8-GPU nodes (``teiresias trace synth --kind teams / philly``):

- ``team``: one team's jobs (its own GPU sizes and job lengths, submitted in bursts),
  1,500 jobs on 144 GPUs at load 0.9;
- ``large``: one team's large jobs (4-32 GPUs), 533 jobs on 40 GPUs at load 0.4;
- ``merged``: 15 teams merged, 2,000 jobs on 192 GPUs at load 4.5;
- ``uniform``: the uniform Philly-like mix (testbed GPU sizes, Poisson arrivals),
  2,000 jobs on 192 GPUs at load 2.

Each shape is drawn with several seeds (``--seeds``); a row's figures are means over them.
Replays as the issue measured the reference: placement ``spread`` (the reference's ``count``
scheme; no placement slowdown), two queues at 3,600 GPU-s, no preemption overhead. Rows
(``ROWS``): srsf (the yardstick), paper las and gittins, each in-queue order and the indexed
last queue alone and combined, and the defaults; with ``--reference DIR`` (the Tiresias
repository's ``simulator/`` folder, run with ``PYENV_VERSION=2.7.18 python2.7`` and an empty
``cplex`` module) its ``shortest-gpu`` (= srsf, a check), ``dlas-gpu`` and
``dlas-gpu-gittins`` with the same two queues, on the same traces. The reference is slow
(minutes per contended replay): ``--work DIR`` keeps its results, keyed by the trace's bytes.

``--limits MODELS`` adds the time-limit table: each shape's traces with a ``time_limit``
column per model (``trace synth --time-limits``), the default policy with the limits and
blind to them (``time_limits`` off), against srsf and paper las.

    .venv/bin/python benchmarks/bench_shapes.py --shapes team --seeds 0   # ~10 s, no reference
    .venv/bin/python benchmarks/bench_shapes.py --reference /path/to/Tiresias/simulator --work /tmp/shapes
    .venv/bin/python benchmarks/bench_shapes.py --shapes merged,uniform --policies srsf,las,gittins+lq+lifo \\
        --limits max,user,user50,round,exact
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.gittins_policy import GittinsPolicy
from teiresias.policy.registry import PolicyParams, build_placement, build_policy
from teiresias.policy.thresholds import fit_thresholds
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.slowdown import SlowdownTable
from teiresias.simulator.synth import (
    LimitParams,
    PhillyParams,
    TeamsParams,
    philly_like,
    teams_like,
    with_time_limits,
)
from teiresias.simulator.trace import TraceJob, write_trace_to

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"
LARGE_MIX = {4: 0.45, 8: 0.35, 16: 0.15, 32: 0.05}
QUEUES = (3600.0,)
CLASSES = (("1", 1, 1), ("2-4", 2, 4), ("8", 5, 8), ("16+", 9, 10**9))


@dataclass(frozen=True)
class Shape:
    jobs: int
    nodes: int
    load: float
    teams: int  # 0: the uniform Philly-like mix
    mix: dict[int, float] | None = None


SHAPES = {
    "team": Shape(1500, 18, 0.9, 1),
    "large": Shape(533, 5, 0.4, 1, LARGE_MIX),
    "merged": Shape(2000, 24, 4.5, 15),
    "uniform": Shape(2000, 24, 2.0, 0),
}

# row -> (registry name, PolicyParams fields); "+lq": last queue by the index; "+rf" / "+lifo":
# queue_order running-first / lifo-resume; "/8": the last queue's index on 8 quantile points;
ROWS: dict[str, tuple[str, dict]] = {
    "srsf": ("srsf", {}),
    "las": ("las", {"queue_order": "fifo"}),
    "las+rf": ("las", {"queue_order": "running-first"}),
    "las+lifo": ("las", {"queue_order": "lifo-resume"}),
    "gittins": ("gittins", {"queue_order": "fifo", "last_queue": "fifo"}),
    "gittins+rf": ("gittins", {"queue_order": "running-first", "last_queue": "fifo"}),
    "gittins+lifo": ("gittins", {"queue_order": "lifo-resume", "last_queue": "fifo"}),
    "gittins+lq": ("gittins", {"queue_order": "fifo", "last_queue": "gittins"}),
    "gittins+lq+rf": ("gittins", {"queue_order": "running-first", "last_queue": "gittins"}),
    "gittins+lq+lifo": ("gittins", {"queue_order": "lifo-resume", "last_queue": "gittins"}),
    "gittins+lq+lifo/8": ("gittins", {"queue_order": "lifo-resume", "last_queue": "gittins", "points": 8}),
    # "+auto": thresholds fitted to the history (queues: auto, teiresias/policy/thresholds.py), as the table.
    "gittins+lq+auto": ("gittins", {"queue_order": "fifo", "last_queue": "gittins", "queues": "auto"}),
    "gittins+lq+lifo+auto": ("gittins", {"queue_order": "lifo-resume", "last_queue": "gittins", "queues": "auto"}),
}
REFERENCE = ("dlas-gpu", "dlas-gpu-gittins")
DEFAULT = "gittins+lq+lifo"

# The reference run as the issue ran it: its own modules, two queues at QUEUES, scheme count.
# The driver only sets the queue list the reference keeps in jobs.py, then calls its main().
_DRIVER = """
import os, sys
ref, trace, spec, sched, logdir, stub, queues = sys.argv[1:8]
sys.path[:0] = [stub, ref]
os.chdir(ref)
sys.argv = ['run_sim.py', '--cluster_spec=' + spec, '--trace_file=' + trace, '--scheme=count',
            '--schedule=' + sched, '--log_path=' + logdir]
import run_sim
q = [float(x) for x in queues.split(',')]
run_sim.JOBS.num_queue = len(q) + 1
run_sim.JOBS.queues = [list() for _ in range(len(q) + 1)]
run_sim.JOBS.queue_limit = q
run_sim.main()
"""


def split(samples: Sequence[float], seed: int = 0) -> tuple[list[float], list[float]]:
    """Two disjoint halves of the samples: (trace draws, history)."""
    s = list(samples)
    random.Random(seed).shuffle(s)
    half = len(s) // 2
    return s[:half], s[half:]


def make_trace(name: str, seed: int, draws: Sequence[float]) -> list[TraceJob]:
    sh = SHAPES[name]
    gpus = sh.nodes * 8
    if sh.teams == 0:
        return philly_like(draws, PhillyParams(sh.jobs, gpus, load=sh.load, max_duration=86400.0), seed)
    params = TeamsParams(sh.jobs, gpus, sh.load, num_teams=sh.teams, gpu_mix=sh.mix, max_duration=86400.0)
    return teams_like(draws, params, seed)


@dataclass
class Result:
    """Per-job (JCT, GPUs, preemptions) of one replay."""

    jct: np.ndarray
    gpus: np.ndarray
    preempt: np.ndarray

    @property
    def avg(self) -> float:
        return float(self.jct.mean())

    @property
    def p95(self) -> float:
        return float(np.percentile(self.jct, 95))

    def by_class(self) -> list[float]:
        return [
            float(self.jct[(self.gpus >= lo) & (self.gpus <= hi)].mean())
            if ((self.gpus >= lo) & (self.gpus <= hi)).any()
            else float("nan")
            for _, lo, hi in CLASSES
        ]


def ours(trace: Sequence[TraceJob], nodes: int, row: str, history: ServiceDistribution, **extra) -> Result:
    name, knobs = ROWS[row]
    knobs = {**knobs, **extra}
    points = knobs.pop("points", None)
    queues = fit_thresholds(history).thresholds if knobs.pop("queues", None) == "auto" else QUEUES
    if name == "gittins":
        policy = GittinsPolicy(
            build_placement("spread"),
            history,
            queues,
            last_queue=knobs["last_queue"],
            queue_order=knobs["queue_order"],
            last_queue_points=points or 16,
            time_limits=knobs.get("time_limits", True),
        )
    else:
        policy = build_policy(name, PolicyParams(queues=QUEUES, placement="spread", **knobs))
    opt = SimulationOptions(progress=False, record_timeline=False, slowdown=SlowdownTable.none())
    res = Simulator(list(trace), Cluster.from_tiresias_spec(1, nodes, 8), policy, opt).run()
    recs = res.records
    return Result(
        np.array([r.jct for r in recs]), np.array([r.gpus for r in recs]), np.array([r.preemptions for r in recs])
    )


def yardsticks(
    name: str, seed: int, draws: Sequence[float], history: ServiceDistribution
) -> tuple[list[TraceJob], Result, Result]:
    """A shape's trace and the two replays every row is measured against: srsf (avg) and paper las (p95)."""
    trace = make_trace(name, seed, draws)
    nodes = SHAPES[name].nodes
    return trace, ours(trace, nodes, "srsf", history), ours(trace, nodes, "las", history)


def reference(ref: Path, work: Path, trace: Sequence[TraceJob], nodes: int, sched: str) -> Result:
    """The reference simulator's replay of ``trace`` (cached in ``work`` by the trace's bytes)."""
    import io

    buf = io.StringIO()
    write_trace_to(buf, trace)
    text = buf.getvalue()
    spec = f"num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,{nodes},8,64,256\n"
    key = hashlib.sha256(f"{text}{spec}{sched}{QUEUES}".encode()).hexdigest()[:16]
    d = work / f"{sched}-{key}"
    out = d / "log" / "job.csv"
    if not out.exists():
        (d / "stub").mkdir(parents=True, exist_ok=True)
        (d / "stub" / "cplex.py").write_text("")  # the reference imports cplex; counting needs none of it
        (d / "trace.csv").write_text(text)
        (d / "spec.csv").write_text(spec)
        args = [str(ref.resolve()), str(d / "trace.csv"), str(d / "spec.csv"), sched, str(d / "log"), str(d / "stub")]
        env = dict(os.environ, PYENV_VERSION="2.7.18")
        subprocess.run(
            ["python2.7", "-c", _DRIVER, *args, ",".join(f"{q:g}" for q in QUEUES)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    return Result(
        np.array([float(r["JCT"]) for r in rows]),
        np.array([int(r["num_gpu"]) for r in rows]),
        np.array([int(r["preempt"]) for r in rows]),
    )


def table(title: str, rows: dict[str, list[tuple[Result, float, float]]], seeds: Sequence[int]) -> None:
    """One shape's rows: means over seeds of avg / srsf, p95 / paper las, JCT per class, preemptions."""
    print(f"\n{title}")
    head = ["row", "avg/srsf", "per seed", "p95/las", *(f"{c[0]} GPU ks" for c in CLASSES), "preempt/job"]
    print(" | ".join(head))
    for row, got in rows.items():
        ratios = [r.avg / s for r, s, _ in got]
        p95 = [r.p95 / lp for r, _, lp in got]
        with warnings.catch_warnings():  # a class no trace of the shape has (no 1-GPU large jobs): nan
            warnings.simplefilter("ignore", RuntimeWarning)
            cls = np.nanmean(np.array([r.by_class() for r, _, _ in got]), axis=0)
        pre = np.mean([r.preempt.mean() for r, _, _ in got])
        print(
            f"{row} | {np.mean(ratios):.3f}x | {' / '.join(f'{x:.2f}' for x in ratios)} | {np.mean(p95):.2f}x | "
            + " | ".join(f"{c / 1000:.1f}" for c in cls)
            + f" | {pre:.2f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--seeds", default="0,1,2", help="trace seeds per shape [0,1,2]")
    ap.add_argument("--policies", default=",".join(ROWS), help="rows, comma-separated; all: " + ",".join(ROWS))
    ap.add_argument("--reference", type=Path, default=None, help="the Tiresias simulator/ folder (python2.7)")
    ap.add_argument("--work", type=Path, default=None, help="keep reference results here [a temporary folder]")
    ap.add_argument(
        "--limits",
        default="",
        help="time-limit models for the limits table (max, user, user50 = half at the max, round, exact)",
    )
    ap.add_argument("--samples", type=Path, default=SAMPLES)
    a = ap.parse_args()
    draws, hist = split(ServiceDistribution.from_samples_file(a.samples).samples)
    history = ServiceDistribution(hist)
    seeds = [int(x) for x in a.seeds.split(",")]
    rows = [r for r in a.policies.split(",") if r]
    for r in rows:
        if r not in ROWS:
            sys.exit(f"unknown row {r!r}; choose from {', '.join(ROWS)}")
    if "srsf" not in rows:
        rows.insert(0, "srsf")
    if "las" not in rows:
        rows.insert(1, "las")
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-shapes-"))
    print(
        f"placement spread (no slowdown), queues {QUEUES}, no preemption overhead, seeds {seeds}; "
        f"history: {len(hist)} held-out samples of {a.samples.name}; load {os.getloadavg()[0]:.1f}"
    )
    t0 = time.process_time()
    for name in a.shapes.split(","):
        sh = SHAPES[name]
        got: dict[str, list[tuple[Result, float, float]]] = {}
        for seed in seeds:
            trace, base, las = yardsticks(name, seed, draws, history)
            for r in rows:
                got.setdefault(r, []).append((ours(trace, sh.nodes, r, history), base.avg, las.p95))
            if a.reference is not None:
                # shortest-gpu is srsf (a check that the replays agree): on the first seed only.
                for sched in ("shortest-gpu", *REFERENCE) if seed == seeds[0] else REFERENCE:
                    res = reference(a.reference, work, trace, sh.nodes, sched)
                    got.setdefault(f"ref {sched}", []).append((res, base.avg, las.p95))
        title = (
            f"{name}: {sh.jobs} jobs on {sh.nodes * 8} GPUs, load {sh.load:g}, "
            + (f"{sh.teams} team(s)" if sh.teams else "uniform mix")
            + f"; srsf avg JCT {np.mean([r.avg for r, _, _ in got['srsf']]):.0f} s"
        )
        table(title, got, seeds)
        if a.limits:
            limit_table(name, a.limits.split(","), seeds, draws, history)
    print(f"\nCPU {time.process_time() - t0:.0f} s (this process; the reference's not counted)")


def limit_table(
    name: str, models: Sequence[str], seeds: Sequence[int], draws: Sequence[float], history: ServiceDistribution
) -> None:
    """The default with declared limits against itself blind, srsf and paper las, per model."""
    sh = SHAPES[name]
    got: dict[str, list[tuple[Result, float, float]]] = {}
    for seed in seeds:
        plain, base, las = yardsticks(name, seed, draws, history)
        got.setdefault("las, blind", []).append((las, base.avg, las.p95))
        got.setdefault(f"{DEFAULT}, blind", []).append((ours(plain, sh.nodes, DEFAULT, history), base.avg, las.p95))
        for model in models:
            at_max = 0.5 if model == "user50" else 0.2
            trace = with_time_limits(plain, LimitParams(model.removesuffix("50"), at_max=at_max), seed)
            got.setdefault(f"{DEFAULT}, limits {model}", []).append(
                (ours(trace, sh.nodes, DEFAULT, history), base.avg, las.p95)
            )
    table(f"{name}: declared time limits (user50: half the jobs at the 7-day maximum)", got, seeds)


if __name__ == "__main__":
    main()
