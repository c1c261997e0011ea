"""What the controller learns from the jobs it ran, and the policy built from it.

The policy's inputs that history changes (Tiresias §3.3.2 and §4.1):

- the 2D-Gittins job-size distribution: the seed file's samples plus the
  GPU-seconds of every job finished under this controller;
- PACKLIMIT, refitted from the measured iteration time of runs by placement;
- each model's skew, from its profiled run (profile placement);
- xi, the measured slowdown of shared runs (sjf-bsbf, docs/sjf-bsbf.md §9);
- with ``policy.preempt_cost: measured`` (gittins), the cost of a preemption
  as this site's jobs pay it (``measured_preempt_cost``): the median over
  the latest COST_WINDOW measurements is the policy's ``preempt_cost``.

The policy is rebuilt only when one of these changed. Everything here reads
the store and the hooks' files; the Controller only calls it in its order.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from profiler.packlimit import PackLimitFit
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import channel, sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.metrics import ControllerMetrics
from slurm_plugin.controller.packlimit import (
    HISTORY_WINDOW,
    current_packlimit,
    run_outcomes,
)
from slurm_plugin.controller.profiles import SkewBook
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.jobfiles import read_records, read_runs, runs_path
from teiresias.policy.base import SchedulingPolicy
from teiresias.policy.sjf_bsbf.model import SharingModel

log = logging.getLogger("teiresias.controller")

PolicyFactory = Callable[[ControllerConfig, Any], SchedulingPolicy]

# Policies that read the GPU-time distribution (sjf-bsbf / sjf-ffs estimate job
# lengths from it: there are no durations live).
_SAMPLE_POLICIES = ("gittins", "sjf-bsbf", "sjf-ffs")
# The preemption cost fed to the policy is the median of this many latest measurements,
# kept in the state DB's meta table under this key (a JSON list, oldest first).
COST_WINDOW = 50
COSTS_META_KEY = "preempt_costs"


def build_distribution(seed: Any, samples: list[float]) -> Any:
    """The 2D-Gittins job-size distribution (Tiresias §3.2.2): the seed file's samples
    plus the GPU-seconds of jobs finished under this controller (None when both are empty)."""
    if seed is None and not samples:
        return None
    if seed is None:
        from teiresias.policy.gittins import ServiceDistribution

        return ServiceDistribution(samples)
    return seed.extended(samples) if samples else seed


def first_timed_step(jobdir: Path, restart: int) -> float | None:
    """When run ``restart``'s first timed step began (wall clock), from the first line
    the hooks wrote for it in runs.jsonl: its time less its steps x median step
    time. None until the run has such a line."""
    try:
        lines = runs_path(jobdir).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            d = json.loads(line)
            if int(d["restart_count"]) == restart and int(d["steps"]) > 0:
                return float(d["time"]) - int(d["steps"]) * float(d["median_step_s"])
        except (ValueError, TypeError, KeyError):
            continue  # a line torn by a kill during an append
    return None


def measured_preempt_cost(jobdir: Path, restart: int, run_start: float) -> tuple[float, float] | None:
    """What the preemption before run ``restart`` cost the job, in seconds, as
    (checkpoint, restore): the save on our signal (checkpoints.jsonl, reason
    "preempt", run ``restart`` - 1) and the time from run ``restart``'s start
    (Slurm's StartTime) to its first timed step: process start, imports, the
    checkpoint load and the hooks' few warm-up steps (docs/policies.md,
    "Preemption cost"). None while either is unknown."""
    saves = [c for c in read_records(jobdir) if c.restart_count == restart - 1 and c.reason == "preempt"]
    if not saves:
        return None
    first = first_timed_step(jobdir, restart)
    if first is None or first < run_start:
        return None
    return saves[-1].seconds, first - run_start


class History:
    """The controller's memory of past jobs, and the policy it implies."""

    def __init__(
        self,
        config: ControllerConfig,
        store: StateStore,
        audit: AuditLog,
        *,
        dry_run: bool,
        policy_factory: PolicyFactory,
    ) -> None:
        self.config = config
        self.store = store
        self.audit = audit
        self.dry_run = dry_run
        self._factory = policy_factory
        self._seed: Any = None
        if self.uses_samples and config.policy.gittins_samples is not None:
            from teiresias.policy.gittins import ServiceDistribution

            self._seed = ServiceDistribution.from_samples_file(config.policy.gittins_samples)
        self._policy: SchedulingPolicy | None = None
        # What the policy was built with: (Gittins sample count, PACKLIMIT, measured xi).
        self._policy_key: tuple[Any, ...] | None = None
        self.skews = SkewBook(config.profiles)
        # sjf-bsbf / sjf-ffs: model -> xi measured live (docs/sjf-bsbf.md §9); loaded on first use.
        self.measured: dict[str, float] | None = None
        self.packlimit_fit: PackLimitFit | None = None
        self._runs_changed = True  # new run outcomes since the last PACKLIMIT fit
        # Measured preemption costs in seconds, oldest first, and the (job, run) already measured.
        self.costs: list[float] = []
        if config.policy.preempt_cost_measured:
            raw = store.get_meta(COSTS_META_KEY)
            self.costs = [float(c) for c in json.loads(raw)] if raw else []
        self._costed: set[tuple[int, int]] = set()
        self.gpus_per_node = 0

    @property
    def uses_samples(self) -> bool:
        return self.config.policy.name in _SAMPLE_POLICIES or self.config.policy.queues_auto

    # -------------------------------------------------------------- policy
    def policy(self, metrics: ControllerMetrics | None = None) -> SchedulingPolicy:
        """Rebuilt when its inputs learned from history change: new finished jobs change
        the Gittins distribution (only the policies in _SAMPLE_POLICIES read it), new run
        outcomes the PACKLIMIT (Tiresias §3.3.2), new shared runs xi."""
        count = self.store.sample_count() if self.uses_samples else 0
        packlimit = self.packlimit()
        sharing_policy = self.config.policy.name in ("sjf-bsbf", "sjf-ffs")
        if sharing_policy and self.measured is None:
            self.measured = self.store.measured_interference()
        measured = self.measured if sharing_policy and self.measured else {}
        cost = self.preempt_cost()
        key = (count, packlimit.packlimit, tuple(sorted(measured.items())), cost)
        if self._policy is None or key != self._policy_key:
            dist = build_distribution(self._seed, self.store.samples()) if self.uses_samples else None
            config = self.config
            if packlimit.source == "history":
                config = replace(config, packlimit=packlimit.packlimit)
            if cost is not None:
                config = replace(config, policy=replace(config.policy, preempt_cost=cost))
            if self._policy is not None and metrics is not None and key[0] != (self._policy_key or key)[0]:
                metrics.refits.inc()
            self._policy = self._factory(config, dist)
            if measured and isinstance(getattr(self._policy, "model", None), SharingModel):
                self._policy.model = sharing.with_measured(self._policy.model, measured)  # type: ignore[attr-defined]
            if sharing_policy and self.uses_samples:
                # Each job's own history for its length (docs/sjf-bsbf.md §9).
                self._policy.history = sharing.histories(self.store.samples_by_job())  # type: ignore[attr-defined]
            self._policy_key = key
        return self._policy

    def packlimit(self) -> PackLimitFit:
        """The PACKLIMIT in force; refitted when run outcomes arrived since the last fit."""
        if self.packlimit_fit is not None and not self._runs_changed:
            return self.packlimit_fit
        old, self._runs_changed = self.packlimit_fit, False
        fit = self.packlimit_fit = current_packlimit(self.config, self.store.runs(latest=HISTORY_WINDOW))
        if old is None:
            log.info(
                "PACKLIMIT %g (%s, %d spread run(s)%s)",
                fit.packlimit,
                fit.source,
                fit.samples,
                f": {fit.reason}" if fit.reason else "",
            )
        elif fit.packlimit != old.packlimit:
            log.info(
                "PACKLIMIT %g -> %g (%s, %d spread run(s), %d misclassified)",
                old.packlimit,
                fit.packlimit,
                fit.source,
                fit.samples,
                fit.misclassified,
            )
            self.audit.write(
                None,
                "packlimit",
                f"{old.packlimit:g} -> {fit.packlimit:g}",
                source=fit.source,
                samples=fit.samples,
                misclassified=fit.misclassified,
            )
        return fit

    def preempt_cost(self) -> float | None:
        """The measured preemption cost in force: the median of the latest COST_WINDOW
        measurements, in whole seconds (one more measurement rarely rebuilds the
        policy); None (the configured cost holds) when not asked for or none yet."""
        if not self.config.policy.preempt_cost_measured or not self.costs:
            return None
        return float(round(statistics.median(self.costs[-COST_WINDOW:])))

    def learn_costs(self, records: Iterable[JobRecord]) -> None:
        """Each resumed run of a tsbatch job, once its hooks timed a step: the preemption
        before it is measured (``measured_preempt_cost``), logged and audited
        (``preempt-cost``). Only with ``policy.preempt_cost: measured``."""
        if self.dry_run or not self.config.policy.preempt_cost_measured:
            return
        live = set()
        for r in records:
            live.add(r.job_id)
            if r.phase is not Phase.RUNNING or not r.run_restart or r.run_start is None:
                continue
            key = (r.job_id, r.run_restart)
            jd = channel.folder(r)
            if key in self._costed or jd is None:
                continue
            try:
                got = measured_preempt_cost(jd, r.run_restart, r.run_start)
            except OSError:
                got = None
            if got is None:
                continue  # not timed yet: asked again next round
            self._costed.add(key)
            ckpt, restore = got
            self.costs.append(round(ckpt + restore, 3))
            del self.costs[:-COST_WINDOW]
            with self.store.transaction():
                self.store.set_meta(COSTS_META_KEY, json.dumps(self.costs))
            log.info(
                "[job %d] preemption measured: %.1f s (checkpoint %.1f s, restore %.1f s)",
                r.job_id,
                ckpt + restore,
                ckpt,
                restore,
            )
            self.audit.write(
                r.job_id,
                "preempt-cost",
                f"{ckpt + restore:.1f} s (checkpoint {ckpt:.1f} s, restore {restore:.1f} s)",
                seconds=round(ckpt + restore, 3),
                ckpt_seconds=round(ckpt, 3),
                restore_seconds=round(restore, 3),
                restart_count=r.run_restart,
            )
        self._costed = {k for k in self._costed if k[0] in live}

    # ---------------------------------------------------------- per job
    def known_skew(self, r: JobRecord) -> bool:
        """Sets the job's skew from its own or its model's profile (Tiresias §3.3.1)."""
        r.skew = self.skews.known(r)
        return r.skew is not None

    def learn_skew(self, r: JobRecord) -> None:
        """A preempted run may have been the profiled one (Tiresias profiles the first run)."""
        skew = self.skews.learn(r)
        if skew is not None and skew != r.skew:
            r.skew = skew
            with self.store.transaction():
                self.store.save_job(r)

    def learn_finished(self, r: JobRecord, gpu_seconds: float) -> None:
        """A job finished: its profile's skew, and its GPU-time as a sample of the site's
        own job-size distribution (Tiresias §3.2.2)."""
        if self.dry_run:
            return
        r.skew = self.skews.learn(r) or r.skew
        if gpu_seconds > 0:
            self.store.add_sample(r.job_id, gpu_seconds)

    def record_runs(self, r: JobRecord) -> None:
        """A run ended: keep its measured iteration time, placement and skew (PACKLIMIT
        history, Tiresias §3.3.2), and xi when it was shared."""
        jd = channel.folder(r)
        if self.dry_run or jd is None:
            return  # not a tsbatch job: no hooks, no iteration time
        planned = len(r.planned.nodes) if r.planned is not None else 0
        try:
            outcomes = run_outcomes(r, read_runs(jd), self.gpus_per_node, planned)
        except OSError as exc:
            log.warning("[job %d] iteration times unreadable (%s); not learned from", r.job_id, exc)
            return
        for o in outcomes:
            if self.store.add_run(o):
                self._runs_changed = True
                log.info(
                    "[job %d] run %d: %.4f s/iteration on %d node(s), fewest %d, skew %s",
                    r.job_id,
                    o.restart_count,
                    o.median_step_s,
                    o.nodes,
                    o.min_nodes,
                    "unknown" if o.skew is None else f"{o.skew:.3f}",
                )
        if r.shared_since is not None and r.shared_until is not None:
            self.measure_xi(r, jd)

    def measure_xi(self, r: JobRecord, jd: Path) -> None:
        """A run that was shared ended: its xi from the hooks' step counts (alone rate over
        shared rate), kept on the record and fed to the sharing model from now on
        (docs/sjf-bsbf.md §9)."""
        since, until = r.shared_since, r.shared_until
        assert since is not None and until is not None
        r.shared_since = r.shared_until = None
        restart = r.closed_restart if r.closed_restart >= 0 else r.restart_count
        xi = sharing.measured_xi(sharing.run_lines(jd, restart), 0.0, since, until, float("inf"))
        if xi is None:
            log.info(
                "[job %d] xi not measured: the hooks write one step count a minute, and the run had"
                " fewer than two alone or shared",
                r.job_id,
            )
            return
        r.interference = round(xi, 4)
        self.measured = {**(self.measured or {}), r.name.strip().lower(): xi}
        self.audit.write(
            r.job_id,
            "interference",
            f"xi {xi:.2f} measured while sharing (alone step rate over shared)",
            xi=round(xi, 4),
            model=r.name,
            shared_since=since,
            shared_until=until,
        )
