"""PACKLIMIT learned from the site's own history (Tiresias §3.3.2).

Tiresias refits PACKLIMIT periodically with a simple classifier over past
jobs' placement and performance. The controller's side of that:

1. When a run of a tsbatch job ends (finished, or requeued), its measured
   iteration time (``runs.jsonl``, written by the in-job hooks:
   teiresias/jobfiles.py ``RunRecord``), its node count against the fewest it
   could have used, and the job's skew S_J become a ``RunOutcome`` row of the
   state DB (``run_outcomes``).
2. The history is turned into ``PlacementOutcome``s: each run next to the
   consolidated baseline of its model, the median iteration time of the
   consolidated runs of the same model (job name) with the same GPU count
   (iteration time depends on the number of workers). Runs without a skew or
   without a baseline yet are left out until one exists.
3. ``profiler.packlimit.fit_packlimit`` gives the threshold, the configured
   PACKLIMIT until there is enough history (``current_packlimit``).

Pure: records in, rows and numbers out (reading ``runs.jsonl`` is the caller's).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping

from profiler.packlimit import DEFAULT_PACKLIMIT, PackLimitFit, PlacementOutcome, fit_packlimit
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller.profiles import model_name
from slurm_plugin.controller.state import JobRecord, RunOutcome
from teiresias.jobfiles import RunRecord

# The fit uses the most recent runs only: recent behaviour of the site's models,
# and a refit that stays tens of milliseconds (fit_packlimit is O(runs x distinct
# skews): ~2 s at 100,000 runs, see benchmarks/bench_packlimit.py).
HISTORY_WINDOW = 5000


def min_nodes(gpus: int, gpus_per_node: int) -> int:
    """The fewest nodes ``gpus`` GPUs fit on: ceil(gpus / GPUs per node), at least 1."""
    if gpus_per_node <= 0:
        return 1
    return max(1, -(-gpus // gpus_per_node))


def run_outcomes(
    rec: JobRecord, runs: Mapping[int, RunRecord], gpus_per_node: int, planned_nodes: int = 0
) -> list[RunOutcome]:
    """The job's ended runs as rows: every run in ``runs`` but the one still open.

    A run's node count is what Slurm told the job (SLURM_JOB_NUM_NODES), else
    ``planned_nodes`` (the controller's placement of that run), else the run is
    left out: a placement we cannot name teaches nothing."""
    open_run = rec.run_restart if rec.run_start is not None else None
    out: list[RunOutcome] = []
    for restart, rr in sorted(runs.items()):
        if restart == open_run or rr.job_id != rec.job_id:
            continue
        nodes = rr.nodes or planned_nodes
        if nodes <= 0 or rec.gpus <= 0:
            continue
        out.append(
            RunOutcome(
                job_id=rec.job_id,
                restart_count=restart,
                model=model_name(rec),
                gpus=rec.gpus,
                nodes=nodes,
                min_nodes=min_nodes(rec.gpus, gpus_per_node),
                skew=rec.skew,
                median_step_s=rr.median_step_s,
                steps=rr.steps,
                time=rr.time,
            )
        )
    return out


def placement_history(runs: Iterable[RunOutcome]) -> list[PlacementOutcome]:
    """Runs next to their consolidated baseline (same model, same GPU count), for fit_packlimit."""
    runs = list(runs)
    packed: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in runs:
        if r.consolidated:
            packed[(r.model, r.gpus)].append(r.median_step_s)
    baseline = {k: statistics.median(v) for k, v in packed.items()}
    out: list[PlacementOutcome] = []
    for r in runs:
        base = baseline.get((r.model, r.gpus))
        if r.skew is None or base is None:
            continue  # waits for a profile / for a consolidated run of its model
        out.append(
            PlacementOutcome(
                skew=r.skew, consolidated=r.consolidated, iteration_time=r.median_step_s, baseline_iteration_time=base
            )
        )
    return out


def current_packlimit(config: ControllerConfig, runs: Iterable[RunOutcome]) -> PackLimitFit:
    """The PACKLIMIT in force (Tiresias §3.3.2): fitted on history when learning is on
    and there is enough of it; else the configured value ("config") or 0.5 ("default")."""
    default = config.packlimit if config.packlimit is not None else DEFAULT_PACKLIMIT
    fallback = "config" if config.packlimit is not None else "default"
    if not config.packlimit_learning:
        return PackLimitFit(default, fallback, 0, 0, "packlimit_learning is off")
    if not 0.0 <= default <= 1.0:
        # Skews lie in [0, 1]: a configured PACKLIMIT above 1 means "never consolidate"; kept as is.
        return PackLimitFit(default, fallback, 0, 0, "configured PACKLIMIT outside [0, 1] is not learned")
    fit = fit_packlimit(placement_history(runs), default=default, min_samples=config.packlimit_min_samples)
    if fit.source != "history":
        return PackLimitFit(fit.packlimit, fallback, fit.samples, fit.misclassified, fit.reason)
    return fit


def packlimit_json(fit: PackLimitFit) -> dict[str, object]:
    """What ``controller run --json`` shows about the PACKLIMIT in force."""
    return {
        "value": fit.packlimit,
        "source": fit.source,
        "samples": fit.samples,
        "misclassified": fit.misclassified,
        **({"reason": fit.reason} if fit.reason else {}),
    }
