"""What the controller learns from the jobs it ran, and the policy built from it.

The policy's inputs that history changes (Tiresias §3.3.2 and §4.1):

- the 2D-Gittins job-size distribution: the seed file's samples plus the
  GPU-seconds of every job finished under this controller;
- PACKLIMIT, refitted from the measured iteration time of runs by placement;
- each model's skew, from its profiled run (profile placement);
- xi, the measured slowdown of shared runs (sjf-bsbf, docs/sjf-bsbf.md §9).

The policy is rebuilt only when one of these changed. Everything here reads
the store and the hooks' files; the Controller only calls it in its order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from profiler.packlimit import PackLimitFit
from slurm_plugin.config import ControllerConfig
from slurm_plugin.controller import sharing
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.metrics import ControllerMetrics
from slurm_plugin.controller.packlimit import (
    HISTORY_WINDOW,
    current_packlimit,
    run_outcomes,
)
from slurm_plugin.controller.profiles import SkewBook
from slurm_plugin.controller.state import JobRecord, StateStore
from teiresias.jobfiles import read_runs
from teiresias.policy.base import SchedulingPolicy
from teiresias.policy.sjf_bsbf.model import SharingModel

log = logging.getLogger("teiresias.controller")

PolicyFactory = Callable[[ControllerConfig, Any], SchedulingPolicy]

# Policies that read the GPU-time distribution (sjf-bsbf / sjf-ffs estimate job
# lengths from it: there are no durations live).
_SAMPLE_POLICIES = ("gittins", "sjf-bsbf", "sjf-ffs")


def build_distribution(seed: Any, samples: list[float]) -> Any:
    """The 2D-Gittins job-size distribution (Tiresias §3.2.2): the seed file's samples
    plus the GPU-seconds of jobs finished under this controller (None when both are empty)."""
    if seed is None and not samples:
        return None
    if seed is None:
        from teiresias.policy.gittins import ServiceDistribution

        return ServiceDistribution(samples)
    return seed.extended(samples) if samples else seed


class History:
    """The controller's memory of past jobs, and the policy it implies."""

    def __init__(self, config: ControllerConfig, store: StateStore, audit: AuditLog, *, dry_run: bool,
                 policy_factory: PolicyFactory) -> None:
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
        key = (count, packlimit.packlimit, tuple(sorted(measured.items())))
        if self._policy is None or key != self._policy_key:
            dist = build_distribution(self._seed, self.store.samples()) if self.uses_samples else None
            config = self.config
            if packlimit.source == "history":
                config = replace(config, packlimit=packlimit.packlimit)
            if self._policy is not None and metrics is not None and key[0] != (self._policy_key or key)[0]:
                metrics.refits.inc()
            self._policy = self._factory(config, dist)
            if measured and isinstance(getattr(self._policy, "model", None), SharingModel):
                self._policy.model = sharing.with_measured(self._policy.model, measured)  # type: ignore[attr-defined]
            self._policy_key = key
        return self._policy

    def packlimit(self) -> PackLimitFit:
        """The PACKLIMIT in force; refitted when run outcomes arrived since the last fit."""
        if self.packlimit_fit is not None and not self._runs_changed:
            return self.packlimit_fit
        old, self._runs_changed = self.packlimit_fit, False
        fit = self.packlimit_fit = current_packlimit(self.config, self.store.runs(latest=HISTORY_WINDOW))
        if old is None:
            log.info("PACKLIMIT %g (%s, %d spread run(s)%s)", fit.packlimit, fit.source, fit.samples,
                     f": {fit.reason}" if fit.reason else "")
        elif fit.packlimit != old.packlimit:
            log.info("PACKLIMIT %g -> %g (%s, %d spread run(s), %d misclassified)", old.packlimit,
                     fit.packlimit, fit.source, fit.samples, fit.misclassified)
            self.audit.write(None, "packlimit", f"{old.packlimit:g} -> {fit.packlimit:g}", source=fit.source,
                             samples=fit.samples, misclassified=fit.misclassified)
        return fit

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
        jd = r.files.job_dir(r.job_id)
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
                log.info("[job %d] run %d: %.4f s/iteration on %d node(s), fewest %d, skew %s", r.job_id,
                         o.restart_count, o.median_step_s, o.nodes, o.min_nodes,
                         "unknown" if o.skew is None else f"{o.skew:.3f}")
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
            log.info("[job %d] xi not measured: the hooks write one step count a minute, and the run had"
                     " fewer than two alone or shared", r.job_id)
            return
        r.interference = round(xi, 4)
        self.measured = {**(self.measured or {}), r.name.strip().lower(): xi}
        self.audit.write(r.job_id, "interference", f"xi {xi:.2f} measured while sharing (alone step rate over"
                         " shared)", xi=round(xi, 4), model=r.name, shared_since=since, shared_until=until)
