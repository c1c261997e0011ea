"""Schedule quality without job durations: policy x trace -> JCT, ratio to the srsf oracle, preemptions.

Prints one table (nothing is asserted); docs/benchmarks.md ("Quality") records
the full figures with their command line.

Traces are Philly-like (``teiresias trace synth -k philly``): GPU-time drawn
from Microsoft's public Philly samples (yarn-gput10000; teiresias/data/
ATTRIBUTION.txt), Poisson arrivals at each offered load, jobs capped at one
day. The samples are split in two halves by a seeded shuffle: one half draws
the traces, the other is the "history" gittins learns its distribution from,
so no policy is shown the very jobs it schedules (srsf, the oracle, reads
their exact sizes; it is the yardstick).

Rows (the paper's FIFO order inside queues in every row, and gittins' paper
last queue unless ``+lq``: the figures below predate the defaults of
docs/policies.md, "Defaults"; benchmarks/bench_shapes.py measures those):
each policy variant, at each preemption overhead (seconds charged when a
preempted job resumes: checkpoint restore). ``gittins+lq`` is gittins with
``--last-queue gittins``; ``gittins+lq+c`` adds ``--preempt-cost`` equal to
the overhead; ``+auto`` rows use queue thresholds fitted to the history
(``--queues auto``) instead of ``--queues``. ``/32`` and ``/64``: the last
queue's index snapped to 32 or 64 quantiles instead of 16; ``c10``: the
preemption cost priced at ten times the overhead (hysteresis); ``/q1800``: a
30 min first queue; ``+p8``: starvation promotion with PROMOTEKNOB 8
(§3.2.3). ``--placement`` picks the placement of every row (``consolidate``
by default; the issue's first figures were taken with ``spread``). ``bound:``
rows are yardsticks, not policies: gittins given the trace's own GPU-times as
its history, and continuous LAS.

    .venv/bin/python benchmarks/bench_quality.py                  # small: 2-core friendly (~4 s CPU)
    .venv/bin/python benchmarks/bench_quality.py --jobs 2000 --loads 1,2,4.5 --overheads 0,30,60
    .venv/bin/python benchmarks/bench_quality.py --jobs 2000 --loads 2,4.5 --placement spread \
        --policies srsf,las,gittins+lq,gittins+lq+c,gittins+lq+c/32,bound:own-dist,bound:las-cont
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import PLACEMENT_NAMES, PolicyParams, build_policy
from teiresias.policy.thresholds import fit_thresholds
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.synth import PhillyParams, philly_like

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "teiresias" / "data" / "yarn-gput10000.csv"
# name -> (registry name, PolicyParams overrides)
VARIANTS: dict[str, tuple[str, dict]] = {
    "srsf": ("srsf", {}),
    "fifo": ("fifo", {}),
    "las": ("las", {}),
    "gittins": ("gittins", {"queue_order": "fifo", "last_queue": "fifo"}),
    "gittins+lq": ("gittins", {"queue_order": "fifo", "last_queue": "gittins"}),
    # ... and preemption-cost aware: its cost is the replay's preemption overhead.
    "gittins+lq+c": ("gittins", {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None}),
    # Queue thresholds fitted to the history (--queues auto; teiresias/policy/thresholds.py).
    "las+auto": ("las", {"queues": "auto"}),
    "gittins+auto": ("gittins", {"queue_order": "fifo", "last_queue": "fifo", "queues": "auto"}),
    "gittins+lq+auto": ("gittins", {"queue_order": "fifo", "last_queue": "gittins", "queues": "auto"}),
    "gittins+lq+c+auto": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "queues": "auto"},
    ),
    # Levers tried against the load-4.5 gap, each on its own (docs/benchmarks.md, "Quality"):
    # finer index resolution in the last queue (32 / 64 quantile points instead of 16) ...
    "gittins+lq+c/32": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "last_queue_points": 32},
    ),
    "gittins+lq+c/64": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "last_queue_points": 64},
    ),
    # ... hysteresis: a preemption priced at ten times what it costs ...
    "gittins+lq+c10": ("gittins", {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": 10.0}),
    # ... a finer first queue: half an hour instead of an hour.
    "gittins+lq+c/q1800": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "queues": (1800.0,)},
    ),
    # ... and the paper's own remedy for starving jobs: promotion back to Q0 once a job has
    # waited PROMOTEKNOB times its executed time (the gap is mid-sized jobs waiting).
    "gittins+lq+c+p8": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "promote_knob": 8.0},
    ),
    "las+p8": ("las", {"promote_knob": 8.0}),
    # Bounds, not policies: the index from the trace's OWN GPU-times (a perfect history),
    # and continuous LAS (attained service re-ranked every round, no overhead model).
    "bound:own-dist": (
        "gittins",
        {"queue_order": "fifo", "last_queue": "gittins", "preempt_cost": None, "history": "own"},
    ),
    "bound:las-cont": ("las", {"continuous": True}),
}


def split(samples: tuple[float, ...], seed: int) -> tuple[list[float], list[float]]:
    """Two disjoint halves: (trace draws, history)."""
    s = list(samples)
    random.Random(seed).shuffle(s)
    half = len(s) // 2
    return s[:half], s[half:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--loads", default="1,4", help="offered loads, comma-separated")
    ap.add_argument("--nodes", type=int, default=24, help="nodes of 8 GPUs [24: 192 GPUs]")
    ap.add_argument(
        "--policies",
        default=",".join(VARIANTS)[: ",".join(VARIANTS).index(",gittins+lq+c/32")],
        help="variants, comma-separated [the first ten]; all: " + ",".join(VARIANTS),
    )
    ap.add_argument("--overheads", default="0,60", help="preemption overheads in seconds (non-oracle rows)")
    ap.add_argument("--queues", default="3600", help="MLFQ thresholds in GPU-seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--placement", default="consolidate", choices=PLACEMENT_NAMES, help="placement of every row [consolidate]"
    )
    ap.add_argument("--samples", default=str(SAMPLES))
    a = ap.parse_args()

    draws, history = split(ServiceDistribution.from_samples_file(a.samples).samples, a.seed)
    cluster = Cluster.from_tiresias_spec(1, a.nodes, 8)
    fitted = fit_thresholds(ServiceDistribution(history)).thresholds
    queues = tuple(float(x) for x in a.queues.split(","))
    names = a.policies.split(",")
    overheads = [float(x) for x in a.overheads.split(",")]
    print(
        f"{a.jobs} Philly-like jobs per trace on {cluster.total_gpus} GPUs, interval 60 s, queues {queues}, "
        f"{a.placement} placement, "
        f"gittins history: {len(history)} held-out samples of {Path(a.samples).name}; "
        f"auto queues fitted to it: {', '.join(f'{q:.0f}' for q in fitted)}"
    )
    print(
        f"{'trace':<12} {'policy':<11} {'ovh s':>5} {'avg JCT':>9} {'median':>8} {'p95':>9} "
        f"{'avg/srsf':>8} {'p95/las':>7} {'preempt/job':>11} {'CPU s':>6}"
    )
    for load in (float(x) for x in a.loads.split(",")):
        trace = philly_like(
            draws,
            PhillyParams(num_jobs=a.jobs, cluster_gpus=cluster.total_gpus, load=load, max_duration=86400.0),
            seed=a.seed,
        )
        label = f"load {load:g}"
        base: dict[str, float] = {}
        for name in names:
            reg, over = VARIANTS[name]
            # Continuous LAS re-ranks every round: with an overhead it may never finish a restore.
            for ovh in [0.0] if reg in ("srsf", "fifo") or name == "bound:las-cont" else overheads:
                knobs = dict(over)
                if "preempt_cost" in knobs:
                    # None: the replay's overhead; a number: that many times it.
                    knobs["preempt_cost"] = ovh if knobs["preempt_cost"] is None else knobs["preempt_cost"] * ovh
                q = knobs.get("queues", queues)
                knobs["queues"] = fitted if q == "auto" else q
                points = knobs.pop("last_queue_points", None)
                own = knobs.pop("history", None) == "own"
                dist = ServiceDistribution([j.num_gpus * j.duration for j in trace] if own else history)
                params = PolicyParams(distribution=dist, placement=a.placement, **knobs)
                policy = build_policy(reg, params)
                if points is not None:
                    policy.last_queue_points = points  # a GittinsPolicy constructor knob, no CLI flag
                opt = SimulationOptions(interval=60.0, preempt_overhead=ovh, progress=False, record_timeline=False)
                c = time.process_time()
                res = Simulator(trace, cluster, policy, opt).run()
                cpu = time.process_time() - c
                s = res.summary
                avg, tail = s.avg_jct, s.p95_jct
                if name == "srsf":
                    base["srsf"] = avg
                if name == "las" and ovh == overheads[0]:
                    base["las_p95"] = tail
                ratio = f"{avg / base['srsf']:.2f}x" if "srsf" in base else "-"
                vs_las = f"{tail / base['las_p95']:.2f}x" if "las_p95" in base else "-"
                print(
                    f"{label:<12} {name:<11} {ovh:>5.0f} {avg:>9.0f} {s.median_jct:>8.0f} "
                    f"{tail:>9.0f} {ratio:>8} {vs_las:>7} {s.preemptions / max(s.jobs, 1):>11.2f} "
                    f"{cpu:>6.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
