"""Cost of PACKLIMIT from history: prints figures, asserts nothing.

1. In the job: the iteration timing the hooks add to every optimizer step
   (``Runtime._time_step``: perf_counter, subtraction, append, comparison),
   best of 5 x 200,000 calls, next to an empty Python call for scale.
2. In the controller: one refit (read the ``runs`` table of a real SQLite
   StateStore + baselines + fit_packlimit) for 1,000 / 10,000 / 100,000
   stored runs, best of 3, over all of them and over the controller's window
   (the latest HISTORY_WINDOW runs). A refit happens only after runs ended.

Usage:
  .venv/bin/python benchmarks/bench_packlimit.py
  .venv/bin/python benchmarks/bench_packlimit.py --runs 1000,10000 --json
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import timeit
from pathlib import Path


def bench_step(n: int = 200_000) -> dict[str, float]:
    from wrappers.hooks.runtime import Runtime

    with tempfile.TemporaryDirectory() as base:
        rt = Runtime({"SLURM_JOB_ID": "1", "TEIRESIAS_JOB_BASE": base})
        step = min(timeit.repeat(rt.timer.tick, number=n, repeat=5)) / n
    empty = min(timeit.repeat(lambda: None, number=n, repeat=5)) / n
    return {"time_step_us": step * 1e6, "empty_call_us": empty * 1e6, "pct_of_10ms_step": step / 0.010 * 100}


def bench_refit(count: int) -> dict[str, float]:
    from slurm_plugin.config import parse_config
    from slurm_plugin.controller.packlimit import HISTORY_WINDOW, current_packlimit
    from slurm_plugin.controller.state import RunOutcome, StateStore

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        store = StateStore(Path(d) / "s.db")
        with store.transaction():
            for i in range(count):
                model = f"model{i % 50}"
                skew = (i % 50) / 50
                nodes = 1 if i % 3 == 0 else 2
                slow = 1.0 + (0.6 * skew if nodes > 1 else 0.0)
                store.add_run(RunOutcome(i, 0, model, 4, nodes, 1, skew, slow * rng.uniform(0.95, 1.05), 100, float(i)))
        cfg = parse_config({"state_db": str(Path(d) / "s.db")})
        out: dict[str, float] = {"runs": count}
        for label, latest in (("all", None), ("window", HISTORY_WINDOW)):
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                fit = current_packlimit(cfg, store.runs(latest=latest))
                best = min(best, time.perf_counter() - t)
            out[f"{label}_ms"], out[f"{label}_packlimit"] = best * 1e3, fit.packlimit
        store.close()
    return out


def main() -> None:
    from slurm_plugin.controller.packlimit import HISTORY_WINDOW

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="1000,10000,100000", help="stored run counts (default 1000,10000,100000)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    out = {"step": bench_step(), "refit": [bench_refit(int(c)) for c in args.runs.split(",")]}
    if args.json:
        print(json.dumps(out))
        return
    s = out["step"]
    print(
        f"iteration timing per optimizer step: {s['time_step_us']:.3f} us "
        f"(empty call {s['empty_call_us']:.3f} us; {s['pct_of_10ms_step']:.4f}% of a 10 ms step)"
    )
    for r in out["refit"]:
        print(
            f"refit, {r['runs']:>7} stored runs: all {r['all_ms']:8.1f} ms (PACKLIMIT {r['all_packlimit']}), "
            f"latest {HISTORY_WINDOW} {r['window_ms']:6.1f} ms (PACKLIMIT {r['window_packlimit']})"
        )


if __name__ == "__main__":
    main()
