"""Simulator speed side by side with the Tiresias reference simulator, on the same traces.

For each workload a contended Philly-like trace is made with ``teiresias trace
synth -k philly`` (GPU-time drawn from the public Philly samples, the §5.1 GPU
mix, Poisson arrivals at the offered load), then for each policy the reference
simulator (SymbioticLab/Tiresias ``simulator/run_sim.py``, Python 2.7) and
``teiresias simulate`` replay it one after the other, each as a child process
of this one, and their CPU seconds (user + system, from the child's rusage)
are compared: the ratio is the speed figure, so both sides run on the same
machine under the same load. ``--repeat N`` alternates them N times (A B A B)
and reports the median of each side.

Settings, as close as the two simulators allow:

- reference: ``--scheme count`` (GPUs counted, no placement), two queues with
  the first threshold at 3,600 GPU-s (``jobs.JOBS.num_queue`` and
  ``queue_limit``, which the reference's README says to set in ``jobs.py``: a
  small driver written to a temporary folder sets them before ``run_sim.main``),
  an empty ``cplex`` package on ``PYTHONPATH`` (``lp.py`` imports it; ``count``
  never calls it), and the Gittins samples ``yarn-gput1000.csv`` in its working
  folder (where ``dlas-gpu-gittins`` reads them);
- teiresias: ``--placement spread`` (a job fits wherever enough GPUs are free,
  what ``count`` models), ``--slowdown none`` (the reference models no placement
  slowdown), queues 3,600 GPU-s, the same samples for gittins, the default
  60 s scheduling interval (``--interval``).

Policies (ours = reference): ``las`` = ``dlas-gpu``, ``gittins`` =
``dlas-gpu-gittins``, ``fifo`` = ``fifo``, ``best-effort`` = ``fjf``, ``srsf``
= ``shortest-gpu``. For fifo and best-effort every job's JCT must be the same
as the reference's (the JCT column says ``same`` or how many differ). srsf's
differ where preemption happens: the reference walks the ranking giving GPUs
to each job that fits the free count and preempts any running job that no
longer fits (so it may preempt a higher-ranked large job and keep a
lower-ranked small one), where teiresias evicts running jobs lowest-ranked
first until the waiting job fits (Tiresias Pseudocode 2): 4 GPUs held by B
(1 GPU), A (2), C (1) in that rank order, D (2) arrives first-ranked: the
reference preempts A, teiresias C then A. las and gittins differ by design
(docs/policies.md: ticks, the ordering inside a queue, the Gittins index).

The reference is not part of teiresias: give a checkout of
https://github.com/SymbioticLab/Tiresias with ``--reference`` and a Python 2.7
with numpy 1.16.6 with ``--python2`` (docs/benchmarks.md says how).

    .venv/bin/python benchmarks/bench_vs_reference.py -r ~/Tiresias --python2 python2.7
    .venv/bin/python benchmarks/bench_vs_reference.py -r ~/Tiresias -w check -p fifo,best-effort,srsf
    .venv/bin/python benchmarks/bench_vs_reference.py -r ~/Tiresias -w w600 -p las --repeat 3 --json out.json

Exit 0 after printing the table, 1 when fifo or best-effort JCTs differ from
the reference's, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES_TRACE = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"  # what traces draw GPU-time from
SAMPLES_GITTINS = ROOT / "teiresias" / "data" / "yarn-gput1000.csv"  # what both Gittins learn from
QUEUE_LIMIT = 3600  # GPU-seconds: the first (only) threshold of the two queues


@dataclass(frozen=True)
class Workload:
    """A contended Philly-like trace on a cluster of ``nodes`` x 8 GPUs."""

    name: str
    jobs: int
    nodes: int
    load: float
    max_duration: float  # seconds; the longest job (trace synth --max-duration)
    seed: int

    @property
    def gpus(self) -> int:
        return self.nodes * 8


WORKLOADS = {
    "w600": Workload("w600", 15_000, 75, 2.0, 86_400, 1),
    "w192": Workload("w192", 2_000, 24, 4.5, 86_400, 2),
    "check": Workload("check", 1_500, 8, 2.0, 86_400, 3),
}
# ours -> the reference's --schedule
POLICIES = {
    "las": "dlas-gpu",
    "gittins": "dlas-gpu-gittins",
    "fifo": "fifo",
    "best-effort": "fjf",
    "srsf": "shortest-gpu",
}
MUST_MATCH = ("fifo", "best-effort")
# What runs without -w / -p: the two speed figures (las on 600 GPUs, gittins overloaded
# on 192) and the JCT check of the policies the reference implements as we do.
DEFAULT_RUNS = (("w600", ("las",)), ("w192", ("gittins", "las")), ("check", ("fifo", "best-effort", "srsf")))

# The reference imports lp.py, which imports cplex; scheme ``count`` never calls it.
_CPLEX_STUB = {
    "cplex/__init__.py": "",
    "cplex/exceptions.py": "class CplexError(Exception):\n    pass\n",
    "cplex/six/__init__.py": "",
    "cplex/six/moves.py": "range = xrange  # noqa\n",
}
# Runs the reference with two queues at QUEUE_LIMIT (its README: set num_queue and
# queue_limit in jobs.py). argv: the reference's simulator folder, then run_sim's flags.
_DRIVER = f"""import sys
sys.path.insert(0, sys.argv[1])
sys.argv = ['run_sim.py'] + sys.argv[2:]
import jobs
import run_sim
jobs.JOBS.num_queue = 2
jobs.JOBS.queues = [list(), list()]
jobs.JOBS.queue_limit = [{QUEUE_LIMIT}]
run_sim.main()
"""


@dataclass
class Row:
    workload: str
    jobs: int
    gpus: int
    load: float
    policy: str
    reference_policy: str
    reference_cpu: float
    ours_cpu: float
    ratio: float
    jct_differ: int  # jobs whose JCT differs from the reference's
    reference_avg_jct: float
    ours_avg_jct: float


class BadInput(Exception):
    """One line for the user; exit 2."""


def reference_dir(path: Path) -> Path:
    """The reference's simulator folder, from a checkout or the folder itself."""
    for d in (path / "simulator", path):
        if (d / "run_sim.py").is_file() and (d / "jobs.py").is_file():
            return d
    raise BadInput(
        f"{path}: no Tiresias simulator there (run_sim.py); give a checkout of "
        "https://github.com/SymbioticLab/Tiresias with --reference"
    )


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    """Run ``cmd`` to the end; its CPU seconds (user + system, its whole process tree)."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=out)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{shlex.join(cmd[:3])} ... exited {proc.returncode}: {' | '.join(tail)}")
    return usage.ru_utime + usage.ru_stime


def make_trace(w: Workload, work: Path) -> Path:
    trace = work / f"{w.name}.csv"
    synth = f"-m teiresias trace synth -k philly -n {w.jobs} -G {w.gpus} -l {w.load} -s {w.seed}".split()
    more = ["-S", str(SAMPLES_TRACE), "--max-duration", str(w.max_duration), "-o", str(trace)]
    subprocess.run([sys.executable, *synth, *more], check=True, capture_output=True)
    return trace


def cluster_spec(w: Workload, work: Path) -> Path:
    """The reference's cluster_spec.csv format, which teiresias reads too: one switch of ``nodes`` x 8."""
    spec = work / f"{w.name}-spec.csv"
    spec.write_text(f"num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,{w.nodes},8,64,256\n")
    return spec


def run_reference(
    python2: list[str], sim: Path, trace: Path, spec: Path, schedule: str, work: Path
) -> tuple[float, Path]:
    """CPU seconds of one reference replay, and its job log."""
    out = work / f"ref-{trace.stem}-{schedule}"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(work / "stub"))
    cmd = [
        *python2,
        str(work / "driver.py"),
        str(sim),
        f"--cluster_spec={spec}",
        "--scheme=count",
        f"--trace_file={trace}",
        f"--schedule={schedule}",
        f"--log_path={out}",
    ]
    cpu = timed(cmd, work, env, work / f"{out.name}.log")
    return cpu, out / "job.csv"


def run_ours(trace: Path, spec: Path, policy: str, work: Path) -> tuple[float, Path]:
    """CPU seconds of one ``teiresias simulate`` replay, and its per-job CSV."""
    jobs_csv = work / f"ours-{trace.stem}-{policy}.csv"
    settings = f"-p {policy} -P spread --slowdown none -q {QUEUE_LIMIT} --no-progress".split()
    files = ["-t", str(trace), "-c", str(spec), "-g", str(SAMPLES_GITTINS), "--jobs-csv", str(jobs_csv)]
    cmd = [sys.executable, "-m", "teiresias", "simulate", *settings, *files]
    cpu = timed(cmd, ROOT, dict(os.environ, PYTHONPATH=str(ROOT)), work / f"{jobs_csv.stem}.log")
    return cpu, jobs_csv


def jcts_reference(path: Path) -> dict[int, float]:
    with path.open() as f:
        return {int(r["job_id"]): float(r["JCT"]) for r in csv.DictReader(f)}


def jcts_ours(path: Path) -> dict[int, float]:
    with path.open() as f:
        return {int(r["job_id"]): float(r["jct"]) for r in csv.DictReader(f)}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-r", "--reference", type=Path, required=True, help="checkout of SymbioticLab/Tiresias")
    ap.add_argument(
        "--python2",
        default="python2.7",
        help="Python 2.7 with numpy 1.16.6, as a command line (default: python2.7)",
    )
    ap.add_argument(
        "-w",
        "--workloads",
        help="comma-separated, of: "
        + ", ".join(f"{k} ({v.jobs} jobs, {v.gpus} GPUs, load {v.load})" for k, v in WORKLOADS.items())
        + "; default: "
        + "; ".join(f"{w} with {','.join(ps)}" for w, ps in DEFAULT_RUNS),
    )
    ap.add_argument("-p", "--policies", help=f"comma-separated, of: {', '.join(POLICIES)} (default: las,gittins)")
    ap.add_argument("-n", "--repeat", type=int, default=1, help="replays per side, alternating (median reported)")
    ap.add_argument("-j", "--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("-k", "--keep", type=Path, help="keep traces and logs in this folder (default: a temporary one)")
    args = ap.parse_args(argv)
    try:
        sim = reference_dir(args.reference.expanduser())
        if args.workloads is None and args.policies is None:
            runs = [(WORKLOADS[w], list(ps)) for w, ps in DEFAULT_RUNS]
        else:
            policies = _names(args.policies or "las,gittins", POLICIES, "policy")
            runs = [(WORKLOADS[w], policies) for w in _names(args.workloads or "w600,w192", WORKLOADS, "workload")]
        if args.repeat < 1:
            raise BadInput(f"--repeat {args.repeat}: give 1 or more")
        python2 = shlex.split(args.python2)
        probe = subprocess.run([*python2, "-c", "import numpy, sys; print(sys.version_info[0])"], capture_output=True)
        if probe.returncode != 0 or probe.stdout.strip() != b"2":
            raise BadInput(f"--python2 {args.python2!r} is not a Python 2 with numpy (pip install numpy==1.16.6)")
    except BadInput as e:
        print(f"bench_vs_reference: {e}", file=sys.stderr)
        return 2

    keep = args.keep
    tmp = None if keep else tempfile.TemporaryDirectory(prefix="bench-vs-ref-")
    work = keep if keep else Path(tmp.name)  # type: ignore[union-attr]
    work.mkdir(parents=True, exist_ok=True)
    for rel, text in _CPLEX_STUB.items():
        (work / "stub" / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / "stub" / rel).write_text(text)
    (work / "driver.py").write_text(_DRIVER)
    shutil.copy(SAMPLES_GITTINS, work / "yarn-gput1000.csv")  # dlas-gpu-gittins reads it from its cwd

    print(f"== teiresias vs the Tiresias reference simulator ({sim}), CPU seconds per replay ==")
    print(f"load average at start: {load_average()} ({os.cpu_count()} CPUs)")
    rows: list[Row] = []
    mismatch = False
    try:
        for w, policies in runs:
            trace, spec = make_trace(w, work), cluster_spec(w, work)
            for policy in policies:
                schedule = POLICIES[policy]
                ref_cpu, ours_cpu = [], []
                for _ in range(args.repeat):
                    t, ref_jobs = run_reference(python2, sim, trace, spec, schedule, work)
                    ref_cpu.append(t)
                    t, our_jobs = run_ours(trace, spec, policy, work)
                    ours_cpu.append(t)
                ref, ours = jcts_reference(ref_jobs), jcts_ours(our_jobs)
                differ = sum(1 for k, v in ref.items() if abs(ours.get(k, -1.0) - v) > 1e-6) + len(
                    ours.keys() - ref.keys()
                )
                if policy in MUST_MATCH and differ:
                    mismatch = True
                r = Row(
                    w.name,
                    w.jobs,
                    w.gpus,
                    w.load,
                    policy,
                    schedule,
                    statistics.median(ref_cpu),
                    statistics.median(ours_cpu),
                    statistics.median(ref_cpu) / max(statistics.median(ours_cpu), 1e-9),
                    differ,
                    statistics.fmean(ref.values()) if ref else 0.0,
                    statistics.fmean(ours.values()) if ours else 0.0,
                )
                rows.append(r)
                print(_line(r), flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"load average at end: {load_average()}  ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print()
    print("| trace | jobs | GPUs | load | policy (reference) | reference CPU s | ours CPU s | ratio | JCTs |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r.workload} | {r.jobs:,} | {r.gpus} | {r.load:g} | {r.policy} ({r.reference_policy}) | "
            f"{r.reference_cpu:.1f} | {r.ours_cpu:.1f} | {r.ratio:.1f}x | {_jct_cell(r)} |"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    if mismatch:
        print("JCTs differ from the reference's for fifo or best-effort", file=sys.stderr)
        return 1
    return 0


def _names(raw: str, known: dict, what: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise BadInput(f"unknown {what} {', '.join(bad) or repr(raw)}; choose from {', '.join(known)}")
    return names


def _jct_cell(r: Row) -> str:
    if r.jct_differ == 0:
        return "same"
    return f"{r.jct_differ} differ (avg {r.reference_avg_jct:,.0f} vs {r.ours_avg_jct:,.0f} s)"


def _line(r: Row) -> str:
    return (
        f"{r.workload:>6} {r.jobs:>7,} jobs {r.gpus:>5} GPUs load {r.load:<4g} {r.policy:>12} ({r.reference_policy}): "
        f"reference {r.reference_cpu:8.1f} s, ours {r.ours_cpu:7.1f} s, {r.ratio:5.1f}x; JCTs {_jct_cell(r)}"
    )


if __name__ == "__main__":
    sys.exit(main())
