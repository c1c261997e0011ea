"""Sweeps: many replays (traces x policies x knobs x seeds) run in parallel, merged into one table.

Capacity planning asks "which policy and which knobs, on which workloads?",
which is many independent replays. A sweep spec (YAML, read through
teiresias.yamlconf: unknown keys named, types checked) lists the axes; every
combination is one run::

    cluster: cluster.yaml              # relative paths: to the spec's folder
    traces: [week1.csv, week2.csv]     # trace files, and/or:
    synth:                             # Philly-like traces made for the sweep
      samples: yarn-gput10000.csv      #   GPU-time samples they are drawn from
      jobs: 500
      loads: [1, 2, 4]
      seeds: [0, 1]
    gittins_samples: history.csv       # needed when gittins is swept
    policies: [srsf, las, gittins]
    queues: [[3600], [3600, 36000], auto]  # each item one set of thresholds, or auto
    last_queue: [fifo, gittins]
    preempt_cost: [0, 60]              # gittins only
    promote_knob: [null, 4]
    preempt_overhead: [0, 60]
    interval: 60
    placement: consolidate

Every axis but ``traces``/``synth`` and ``policies`` is optional (defaults:
``teiresias simulate``'s). A knob a policy does not read is not multiplied
out for it (``last_queue`` and ``preempt_cost`` only for gittins; ``queues``
and ``promote_knob`` only for las and gittins), so the table has no duplicate
rows. ``auto`` thresholds are fitted to ``gittins_samples`` in each run
(teiresias.policy.thresholds; the row's ``queues`` shows the fitted ones).

Where runs go: a local process pool (``run_local``), or a Slurm job array on
the site's own cluster (``run_on_slurm``): one array task per run, each
writing its row to ``WORKDIR/results/<i>.json``; the caller merges them.
The workdir must be visible from the compute nodes (a shared file system).
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from teiresias import yamlconf
from teiresias.errors import ConfigError, TeiresiasError

_KEYS = (
    "cluster",
    "traces",
    "synth",
    "gittins_samples",
    "policies",
    "queues",
    "last_queue",
    "promote_knob",
    "preempt_overhead",
    "preempt_cost",
    "interval",
    "placement",
)
_SYNTH_KEYS = ("samples", "jobs", "loads", "seeds", "max_duration")
# Policies that read queues / promote_knob; only gittins reads last_queue.
_MLFQ = ("las", "gittins")
Queues: TypeAlias = tuple[float, ...] | Literal["auto"]
"""One set of queue thresholds, or "auto": fitted to the GPU-time samples (teiresias.policy.thresholds)."""


class SweepError(TeiresiasError):
    """A sweep's runs could not all be done (a Slurm array task failed, sbatch refused)."""


@dataclass(frozen=True)
class SweepRun:
    """One replay of the sweep: everything a worker needs, by value (it crosses process and node boundaries)."""

    index: int
    trace: str  # path of the trace file
    trace_label: str
    cluster: str
    policy: str
    queues: Queues = (3600.0,)
    last_queue: str = "fifo"
    promote_knob: float | None = None
    preempt_overhead: float = 0.0
    preempt_cost: float = 0.0
    interval: float = 60.0
    placement: str = "consolidate"
    gittins_samples: str | None = None


@dataclass(frozen=True)
class SynthSpec:
    samples: Path
    jobs: int
    loads: tuple[float, ...]
    seeds: tuple[int, ...]
    max_duration: float = 86400.0


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    cluster: Path
    traces: tuple[Path, ...]
    synth: SynthSpec | None
    gittins_samples: Path | None
    policies: tuple[str, ...]
    queues: tuple[Queues, ...]
    last_queue: tuple[str, ...]
    preempt_cost: tuple[float, ...]
    promote_knob: tuple[float | None, ...]
    preempt_overhead: tuple[float, ...]
    interval: float
    placement: str


# -- reading the spec ---------------------------------------------------------
def _listed(src: Path, key: str, value: Any, names: bool = False) -> list:
    """An axis as a list. One bare number stands for a one-item list (``preempt_overhead:
    30``); on an axis of names (``names``: traces, policies, queues, last_queue) a bare
    string is refused, naming the list form: the docs write those as lists, and
    ``policies: las,fifo`` would otherwise be one unknown name."""
    if names and isinstance(value, str):
        raise ConfigError(f"{src}: {key}: must be a list, e.g. [{value}]; got the string {value!r}")
    return value if isinstance(value, list) else [value]


def _nonempty(src: Path, key: str, value: Any, names: bool = False) -> list:
    items = _listed(src, key, value, names)
    if not items:
        raise ConfigError(f"{src}: {key}: must name at least one value")
    return items


def _file(src: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{src}: {key}: must be a file path, got {value!r}")
    p = Path(value)
    p = p if p.is_absolute() else src.parent / p
    if not p.is_file():
        raise ConfigError(f"{src}: {key}: file {p} does not exist")
    return p


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep spec; ConfigError naming the file and key on any mistake."""
    from teiresias.policy.registry import PLACEMENT_NAMES, POLICY_NAMES

    src = Path(path)
    data = yamlconf.load_yaml(src, "sweep spec")
    if not isinstance(data, dict):
        raise ConfigError(f"{src}: a sweep spec is a mapping of keys ({', '.join(_KEYS)}), got {type(data).__name__}")
    yamlconf.check_keys(src, data, _KEYS)
    if "cluster" not in data:
        raise ConfigError(f"{src}: cluster: missing; name the cluster file (YAML or cluster_spec.csv)")
    cluster = _file(src, "cluster", data["cluster"])
    traces = tuple(
        _file(src, f"traces[{i}]", t) for i, t in enumerate(_listed(src, "traces", data.get("traces", []), names=True))
    )
    synth = None
    if data.get("synth") is not None:
        s = yamlconf.mapping(src, "synth", data["synth"], _SYNTH_KEYS)
        for k in ("samples", "jobs", "loads"):
            if k not in s:
                raise ConfigError(f"{src}: synth.{k}: missing (synth needs samples, jobs and loads)")
        jobs = yamlconf.number(src, "synth.jobs", s["jobs"], minimum=1)
        if jobs != int(jobs):
            raise ConfigError(f"{src}: synth.jobs: must be a whole number, got {s['jobs']!r}")
        seeds = []
        for i, x in enumerate(_nonempty(src, "synth.seeds", s.get("seeds", [0]))):
            if isinstance(x, bool) or not isinstance(x, int) or x < 0:
                raise ConfigError(f"{src}: synth.seeds[{i}]: must be a whole number >= 0, got {x!r}")
            seeds.append(x)
        synth = SynthSpec(
            samples=_file(src, "synth.samples", s["samples"]),
            jobs=int(jobs),
            loads=tuple(
                yamlconf.number(src, f"synth.loads[{i}]", x, minimum=1e-9)
                for i, x in enumerate(_nonempty(src, "synth.loads", s["loads"]))
            ),
            seeds=tuple(seeds),
            max_duration=yamlconf.number(src, "synth.max_duration", s.get("max_duration", 86400.0), minimum=1),
        )
    if not traces and synth is None:
        raise ConfigError(f"{src}: traces: give trace files and/or a synth block; the sweep has nothing to replay")
    if "policies" not in data:
        raise ConfigError(f"{src}: policies: missing; list policies from: {', '.join(POLICY_NAMES)}")
    policies = []
    for i, p in enumerate(_nonempty(src, "policies", data["policies"], names=True)):
        if p not in POLICY_NAMES:
            raise ConfigError(f"{src}: policies[{i}]: unknown policy {p!r}; choose from: {', '.join(POLICY_NAMES)}")
        if p in policies:
            raise ConfigError(f"{src}: policies: {p!r} is listed twice")
        policies.append(p)
    queues: list[Queues] = []
    raw_q = data.get("queues", [[3600]])
    if isinstance(raw_q, list) and raw_q and all(isinstance(q, (int, float)) for q in raw_q):
        raw_q = [raw_q]  # one set of thresholds written flat: [3600, 36000]
    for i, qs in enumerate(_nonempty(src, "queues", raw_q, names=True)):
        if qs == "auto":
            queues.append("auto")
            continue
        got = tuple(yamlconf.number(src, f"queues[{i}]", q, minimum=1e-9) for q in _nonempty(src, f"queues[{i}]", qs))
        if any(b <= a for a, b in zip(got, got[1:])):
            raise ConfigError(f"{src}: queues[{i}]: thresholds must be strictly increasing, got {list(got)}")
        queues.append(got)
    last = []
    for i, x in enumerate(_nonempty(src, "last_queue", data.get("last_queue", ["gittins"]), names=True)):
        if x not in ("fifo", "gittins"):
            raise ConfigError(f"{src}: last_queue[{i}]: must be fifo or gittins, got {x!r}")
        last.append(x)
    knobs = [
        None if k is None else yamlconf.number(src, f"promote_knob[{i}]", k, minimum=0)
        for i, k in enumerate(_nonempty(src, "promote_knob", data.get("promote_knob", [None])))
    ]
    costs = [
        yamlconf.number(src, f"preempt_cost[{i}]", x, minimum=0)
        for i, x in enumerate(_nonempty(src, "preempt_cost", data.get("preempt_cost", [0])))
    ]
    overheads = [
        yamlconf.number(src, f"preempt_overhead[{i}]", x, minimum=0)
        for i, x in enumerate(_nonempty(src, "preempt_overhead", data.get("preempt_overhead", [0])))
    ]
    interval = yamlconf.number(src, "interval", data.get("interval", 60.0), minimum=0)
    placement = data.get("placement", "consolidate")
    if placement not in PLACEMENT_NAMES:
        raise ConfigError(f"{src}: placement: must be one of {', '.join(PLACEMENT_NAMES)}, got {placement!r}")
    samples = _file(src, "gittins_samples", data["gittins_samples"]) if data.get("gittins_samples") else None
    if samples is None and ("gittins" in policies or "auto" in queues):
        raise ConfigError(
            f"{src}: gittins_samples: missing; gittins and queues: auto need job GPU-time samples "
            "(a CSV with a 'duration' column)"
        )
    return SweepSpec(
        src,
        cluster,
        traces,
        synth,
        samples,
        tuple(policies),
        tuple(queues),
        tuple(last),
        tuple(costs),
        tuple(knobs),
        tuple(overheads),
        interval,
        placement,
    )


# -- expanding it into runs -----------------------------------------------------
def expand(spec: SweepSpec, workdir: Path) -> list[SweepRun]:
    """Every run of the sweep; synthesized traces are written into ``workdir/traces`` first.

    The cluster file and traces are checked here (one error before any run).
    """
    from teiresias.clusterspec import load_cluster
    from teiresias.simulator.trace import read_trace, write_trace

    cluster = load_cluster(spec.cluster)
    traces: list[tuple[str, str]] = []
    for t in spec.traces:
        read_trace(t, cluster)
        traces.append((str(t.resolve()), t.name))
    if spec.synth is not None:
        from teiresias.policy.gittins import ServiceDistribution
        from teiresias.simulator.synth import PhillyParams, philly_like

        samples = ServiceDistribution.from_samples_file(spec.synth.samples).samples
        (workdir / "traces").mkdir(parents=True, exist_ok=True)
        for load in spec.synth.loads:
            for seed in spec.synth.seeds:
                jobs = philly_like(
                    samples,
                    PhillyParams(
                        num_jobs=spec.synth.jobs,
                        cluster_gpus=cluster.total_gpus,
                        load=load,
                        max_duration=spec.synth.max_duration,
                        max_gpus=cluster.total_gpus,
                    ),
                    seed=seed,
                )
                p = workdir / "traces" / f"philly-n{spec.synth.jobs}-load{load:g}-seed{seed}.csv"
                write_trace(p, jobs)
                traces.append((str(p.resolve()), p.stem))
    runs: list[SweepRun] = []
    samples_path = str(spec.gittins_samples.resolve()) if spec.gittins_samples else None
    for (trace, label), policy in itertools.product(traces, spec.policies):
        mlfq = policy in _MLFQ
        for queues, last, cost, knob, ovh in itertools.product(
            spec.queues if mlfq else ((3600.0,),),
            spec.last_queue if policy == "gittins" else ("fifo",),
            spec.preempt_cost if policy == "gittins" else (0.0,),
            spec.promote_knob if mlfq else (None,),
            spec.preempt_overhead,
        ):
            runs.append(
                SweepRun(
                    index=len(runs),
                    trace=trace,
                    trace_label=label,
                    cluster=str(spec.cluster.resolve()),
                    policy=policy,
                    queues=queues,
                    last_queue=last,
                    preempt_cost=cost,
                    promote_knob=knob,
                    preempt_overhead=ovh,
                    interval=spec.interval,
                    placement=spec.placement,
                    gittins_samples=samples_path if policy == "gittins" or queues == "auto" else None,
                )
            )
    return runs


# -- running ------------------------------------------------------------------
def run_one(run: SweepRun) -> dict:
    """Replay one run; its row of the merged table (knobs + the ``--json`` summary keys)."""
    from teiresias.clusterspec import load_cluster
    from teiresias.policy.gittins import ServiceDistribution
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator.engine import SimulationOptions, Simulator
    from teiresias.simulator.trace import read_trace

    cluster = load_cluster(run.cluster)
    trace = read_trace(run.trace, cluster)
    dist = ServiceDistribution.from_samples_file(run.gittins_samples) if run.gittins_samples else None
    queues = run.queues
    if queues == "auto":
        from teiresias.policy.thresholds import fit_thresholds

        assert dist is not None  # load_spec requires gittins_samples for auto
        queues = fit_thresholds(dist).thresholds
    params = PolicyParams(
        queues=queues,
        promote_knob=run.promote_knob,
        distribution=dist,
        placement=run.placement,
        last_queue=run.last_queue,
        preempt_cost=run.preempt_cost,
    )
    opt = SimulationOptions(
        interval=run.interval, preempt_overhead=run.preempt_overhead, progress=False, record_timeline=False
    )
    s = Simulator(trace, cluster, build_policy(run.policy, params), opt).run().summary
    row = {k: v for k, v in asdict(run).items() if k not in ("cluster", "gittins_samples")}
    row["queues"] = list(queues)
    row["queues_auto"] = run.queues == "auto"
    row.update(s.as_json())
    row["preemptions_per_job"] = s.preemptions / s.jobs if s.jobs else 0.0
    return row


def run_local(runs: Sequence[SweepRun], workers: int | None = None) -> list[dict]:
    """Every run in a local process pool (``workers`` processes; default: the CPUs)."""
    n = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    if n == 1:
        return [run_one(r) for r in runs]
    with ProcessPoolExecutor(max_workers=n) as pool:
        return list(pool.map(run_one, runs))


def write_runs(runs: Sequence[SweepRun], workdir: Path) -> Path:
    """The runs as JSON, for array tasks to read (``runs.json`` in ``workdir``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "results").mkdir(exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    p = workdir / "runs.json"
    p.write_text(json.dumps([asdict(r) for r in runs], indent=1), encoding="utf-8")
    return p


def array_task(workdir: Path, index: int) -> Path:
    """One Slurm array task: run ``index`` of ``workdir/runs.json``, its row to ``results/<index>.json``."""
    raw = json.loads((workdir / "runs.json").read_text(encoding="utf-8"))[index]
    if raw["queues"] != "auto":
        raw["queues"] = tuple(raw["queues"])
    row = run_one(SweepRun(**raw))
    out = workdir / "results" / f"{index}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(row), encoding="utf-8")
    tmp.replace(out)  # a reader never sees half a row
    return out


def sbatch_command(workdir: Path, n: int, partition: str | None, extra: Iterable[str] = ()) -> list[str]:
    """The sbatch line of the array: one task per run, ``--wait`` so sbatch returns when all ended."""
    task = f"{shlex.quote(sys.executable)} -m teiresias.simulator.sweep {shlex.quote(str(workdir))}"
    cmd = [
        "sbatch",
        "--parsable",
        "--wait",
        f"--array=0-{n - 1}",
        "--job-name=teiresias-sweep",
        "--ntasks=1",
        "--cpus-per-task=1",
        f"--output={workdir}/logs/%a.out",
        f"--chdir={workdir}",
    ]
    if partition:
        cmd.append(f"--partition={partition}")
    cmd.extend(extra)
    cmd.append(f"--wrap={task}")
    return cmd


def run_on_slurm(
    runs: Sequence[SweepRun],
    workdir: Path,
    partition: str | None = None,
    extra: Iterable[str] = (),
    env: dict[str, str] | None = None,
) -> tuple[str, list[dict]]:
    """Every run as one task of a Slurm job array; returns (array job id, rows in run order).

    sbatch ``--wait`` blocks until every task has ended (the array's exit
    status is the worst task's); the rows are then read back. A task that
    left no row is named with the tail of its log.
    """
    write_runs(runs, workdir)
    for stale in (workdir / "results").glob("*.json"):
        stale.unlink()
    cmd = sbatch_command(workdir, len(runs), partition, extra)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise SweepError("--on-slurm: sbatch not found; run on a Slurm submit host or drop --on-slurm") from None
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id:
        err = (proc.stderr.strip().splitlines() or ["no job id"])[-1]
        raise SweepError(f"--on-slurm: sbatch refused the array: {err}")
    rows = []
    for r in runs:
        p = workdir / "results" / f"{r.index}.json"
        if not p.is_file():
            log = workdir / "logs" / f"{r.index}.out"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else ["no log"]
            raise SweepError(
                f"--on-slurm: array task {job_id}_{r.index} left no result "
                f"({tail[0] if tail else 'empty log'}); see {log}"
            )
        rows.append(json.loads(p.read_text(encoding="utf-8")))
    return job_id, rows


# -- merging ----------------------------------------------------------------------
COLUMNS = (
    "index",
    "trace_label",
    "policy",
    "queues",
    "queues_auto",
    "last_queue",
    "preempt_cost",
    "promote_knob",
    "preempt_overhead",
    "interval",
    "placement",
    "jobs",
    "avg_jct",
    "median_jct",
    "p95_jct",
    "avg_queue_delay",
    "makespan",
    "preemptions",
    "preemptions_per_job",
    "gpu_utilization",
    "avg_jct_vs_srsf",
    "wall_seconds",
    "trace",
)


def add_ratios(rows: list[dict]) -> list[dict]:
    """``avg_jct_vs_srsf``: each row's average JCT over srsf's on the same trace and overhead (None without)."""
    base = {(r["trace"], r["preempt_overhead"]): r["avg_jct"] for r in rows if r["policy"] == "srsf"}
    for r in rows:
        b = base.get((r["trace"], r["preempt_overhead"]))
        r["avg_jct_vs_srsf"] = r["avg_jct"] / b if b else None
    return rows


def write_csv(fh, rows: Sequence[dict]) -> None:
    import csv

    w = csv.writer(fh)
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(
            [
                " ".join(f"{q:g}" for q in r["queues"]) if k == "queues" else ("" if r.get(k) is None else r.get(k))
                for k in COLUMNS
            ]
        )


def label(r: dict) -> str:
    """A run's knobs in a few characters (table and plot)."""
    parts = [r["policy"]]
    if r["policy"] in _MLFQ:
        parts.append("qauto" if r.get("queues_auto") else "q" + "/".join(f"{q:g}" for q in r["queues"]))
        if r["promote_knob"] is not None:
            parts.append(f"k{r['promote_knob']:g}")
    if r["last_queue"] != "fifo":
        parts.append(f"lq-{r['last_queue']}")
    if r.get("preempt_cost"):
        parts.append(f"c{r['preempt_cost']:g}")
    if r["preempt_overhead"]:
        parts.append(f"o{r['preempt_overhead']:g}")
    return " ".join(parts)


def table(rows: Sequence[dict]) -> str:
    head = f"{'trace':<28} {'run':<34} {'avg JCT':>9} {'p95 JCT':>9} {'vs srsf':>7} {'preempt/job':>11}"
    lines = [head]
    for r in rows:
        ratio = f"{r['avg_jct_vs_srsf']:.2f}x" if r.get("avg_jct_vs_srsf") else "-"
        lines.append(
            f"{r['trace_label'][:28]:<28} {label(r)[:34]:<34} {r['avg_jct']:>9.0f} {r['p95_jct']:>9.0f} "
            f"{ratio:>7} {r['preemptions_per_job']:>11.2f}"
        )
    return "\n".join(lines)


def plot(fh, rows: Sequence[dict], fmt: str = "png") -> None:
    """One figure: average JCT of every run, one panel per trace (log x), runs labelled by their knobs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r["trace_label"] for r in rows))
    per = max(len([r for r in rows if r["trace_label"] == t]) for t in traces)
    fig, axes = plt.subplots(
        len(traces), 1, figsize=(8, 0.6 + 0.28 * per * len(traces) + 0.5 * len(traces)), squeeze=False
    )
    for ax, t in zip(axes[:, 0], traces):
        mine = [r for r in rows if r["trace_label"] == t]
        ax.barh([label(r) for r in mine], [r["avg_jct"] for r in mine], color="#4c72b0")
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(t, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("average JCT (s)", fontsize=8)
    fig.tight_layout()
    fig.savefig(fh, format=fmt)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m teiresias.simulator.sweep WORKDIR``: the body of one array task (SLURM_ARRAY_TASK_ID)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or "SLURM_ARRAY_TASK_ID" not in os.environ:
        print(
            "usage: python -m teiresias.simulator.sweep WORKDIR (inside a Slurm array task; "
            "teiresias simulate --sweep SPEC --on-slurm submits it)",
            file=sys.stderr,
        )
        return 2
    try:
        array_task(Path(args[0]), int(os.environ["SLURM_ARRAY_TASK_ID"]))
    except TeiresiasError as exc:
        print(f"teiresias: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
