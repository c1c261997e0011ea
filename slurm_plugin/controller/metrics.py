"""Prometheus metrics of the live controller (``metrics:`` in the config; docs/admin.md "Metrics").

Two kinds, both fed by :meth:`ControllerMetrics.observe_round` once per round
from the controller's thread and read by the HTTP server's thread:

- events since the controller started (counters, histograms, summaries):
  preemptions, requeues, migrations, failed actions, round and poll times,
  JCT and queueing delay of finished jobs, Gittins refits;
- the state at the last round (gauges, and the attained GPU-time histogram
  of the active jobs), replaced whole each round under a lock so that a
  scrape never sees half a round.

Labels are bounded sets (phase, queue, reason category, action, VC): no job
id or user name, so the series stay few and the metrics leak no job. Every
known label value is exported from the start, at 0: a series that is absent
cannot be told from a scrape that failed, and ``rate()`` needs its zeros.
Beside them: ``teiresias_build_info`` and the process's own metrics
(``process_*``, ``python_*``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    Summary,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from slurm_plugin.controller import accounting
from slurm_plugin.controller.state import JobRecord

if TYPE_CHECKING:  # loop.py imports this module's users, not the other way round
    from slurm_plugin.controller.loop import RoundResult

# Attained GPU-seconds buckets beside the configured queue thresholds: 1 min .. 1 week.
ATTAINED_BUCKETS = (60.0, 600.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0)
# Round and poll times: a round is ~10 ms with 100 jobs, seconds with 10,000 on a slow slurmctld.
TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Every metric name the controller exports (the Grafana dashboard's test checks against it).
METRIC_NAMES = (
    "teiresias_jobs",
    "teiresias_attained_gpu_seconds",
    "teiresias_preemptions_total",
    "teiresias_migrations_total",
    "teiresias_requeues_total",
    "teiresias_lost_gpu_seconds_total",
    "teiresias_round_duration_seconds",
    "teiresias_slurm_poll_seconds",
    "teiresias_failed_actions_total",
    "teiresias_job_completion_seconds",
    "teiresias_job_queueing_delay_seconds",
    "teiresias_vc_guaranteed_gpus",
    "teiresias_vc_used_gpus",
    "teiresias_packlimit",
    "teiresias_gittins_refits_total",
    "teiresias_rounds_total",
    "teiresias_round_failures_total",
    "teiresias_last_round_timestamp_seconds",
    "teiresias_build_info",
)
# The process's own (prometheus_client's collectors), for the usual dashboards.
PROCESS_NAMES = (
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_cpu_seconds",
    "process_open_fds",
    "process_max_fds",
    "python_info",
    "python_gc_objects_collected",
    "python_gc_objects_uncollectable",
    "python_gc_collections",
)
# Label values exported at 0 before they first happen.
PHASES = ("PENDING", "STARTING", "RUNNING", "PREEMPTING")
PREEMPTION_REASONS = ("priority", "vc-guarantee", "migration", "lease", "other")
REQUEUE_REASONS = ("checkpoint", "grace-timeout", "no-checkpoint", "other")
ACTIONS = ("start", "hold", "signal", "requeue")
ROUND_FAILURES = ("slurm-unreachable", "slurm-error")
# Pending connections the /metrics socket queues (listen backlog): socketserver's 5 made
# 40 of 200 concurrent scrapes time out (issue 21 item 7); the kernel caps it at somaxconn.
BACKLOG = 1024


def preemption_reason(why: str) -> str:
    """The bounded category of a plan's preemption reason (its text names jobs and nodes)."""
    if why.startswith("migrated to"):
        return "migration"
    if "for guaranteed job" in why or "guaranteed job moves" in why:
        return "vc-guarantee"
    if "lease" in why:
        return "lease"
    if "higher-priority" in why:
        return "priority"
    return "other"


def requeue_reason(why: str) -> str:
    """The bounded category of a requeue action's reason (controller/preemption.py, loop.py)."""
    if why.startswith("checkpoint acknowledged"):
        return "checkpoint"
    if why.startswith("no acknowledgement"):
        return "grace-timeout"
    if "not a tsbatch job" in why:
        return "no-checkpoint"
    return "other"


@dataclass
class _Gauges:
    """The state at the last round, exported as it is."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (phase, queue) -> count
    attained: list[float] = field(default_factory=list)
    vcs: list[tuple[str, int, int, int]] = field(default_factory=list)  # name, quota, guaranteed, opportunistic
    packlimit: tuple[float, str] | None = None
    last_round: float | None = None


class _StateCollector(Collector):
    def __init__(self, owner: ControllerMetrics) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Any]:
        with self.owner._lock:
            g = self.owner._gauges
            thresholds = self.owner.buckets
            jobs = GaugeMetricFamily(
                "teiresias_jobs", "Managed jobs at the last round, by phase and queue", labels=["phase", "queue"]
            )
            counts_by = {(p, f"Q{q + 1}"): 0 for p in PHASES for q in range(self.owner.queues)}
            counts_by.update(g.jobs)
            for (phase, queue), n in sorted(counts_by.items()):
                jobs.add_metric([phase, queue], n)
            yield jobs
            counts = [sum(1 for a in g.attained if a <= b) for b in thresholds]
            yield HistogramMetricFamily(
                "teiresias_attained_gpu_seconds",
                "Attained GPU-seconds of the active jobs at the last round",
                buckets=[*((floatToGoString(b), c) for b, c in zip(thresholds, counts)), ("+Inf", len(g.attained))],
                sum_value=sum(g.attained),
            )
            quota = GaugeMetricFamily(
                "teiresias_vc_guaranteed_gpus", "GPUs guaranteed to each VC (its quota)", labels=["vc"]
            )
            used = GaugeMetricFamily(
                "teiresias_vc_used_gpus", "GPUs each VC's jobs hold, guaranteed or opportunistic", labels=["vc", "kind"]
            )
            for name, q, guaranteed, opportunistic in g.vcs:
                quota.add_metric([name], q)
                used.add_metric([name, "guaranteed"], guaranteed)
                used.add_metric([name, "opportunistic"], opportunistic)
            yield quota
            yield used
            pl = GaugeMetricFamily(
                "teiresias_packlimit", "PACKLIMIT in force (profile placement), and its source", labels=["source"]
            )
            if g.packlimit is not None:
                pl.add_metric([g.packlimit[1]], g.packlimit[0])
            yield pl
            last = GaugeMetricFamily("teiresias_last_round_timestamp_seconds", "When the last round ended")
            if g.last_round is not None:
                last.add_metric([], g.last_round)
            yield last


class ControllerMetrics:
    """The controller's metrics in a registry of their own (nothing of the process's default one)."""

    def __init__(self, queue_thresholds: Iterable[float] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        thresholds = tuple(float(t) for t in queue_thresholds)
        self.buckets = tuple(sorted({*ATTAINED_BUCKETS, *thresholds}))
        self.queues = len(thresholds) + 1  # Q1..QK: teiresias_jobs' queue label values
        self._lock = threading.Lock()
        self._gauges = _Gauges()
        r = self.registry
        self.preemptions = Counter(
            "teiresias_preemptions", "Jobs preempted, by the category of the plan's reason", ["reason"], registry=r
        )
        self.migrations = Counter(
            "teiresias_migrations",
            "Running guaranteed jobs moved with their rebound VC cells (a kind of preemption)",
            registry=r,
        )
        self.requeues = Counter(
            "teiresias_requeues", "Requeues of preempted jobs, by what let them go", ["reason"], registry=r
        )
        self.lost = Counter(
            "teiresias_lost_gpu_seconds",
            "Work lost to preemptions: GPU-seconds since each preempted run's last checkpoint",
            registry=r,
        )
        self.failed = Counter(
            "teiresias_failed_actions", "Actions Slurm refused or that failed", ["action"], registry=r
        )
        self.round_time = Histogram(
            "teiresias_round_duration_seconds", "Duration of a controller round", buckets=TIME_BUCKETS, registry=r
        )
        self.poll_time = Histogram(
            "teiresias_slurm_poll_seconds", "Time to read jobs and nodes from Slurm", buckets=TIME_BUCKETS, registry=r
        )
        self.jct = Summary("teiresias_job_completion_seconds", "JCT of finished jobs (end - submit)", registry=r)
        self.queueing = Summary(
            "teiresias_job_queueing_delay_seconds", "Time finished jobs spent waiting (JCT - executed time)", registry=r
        )
        self.refits = Counter(
            "teiresias_gittins_refits", "2D-Gittins distribution rebuilt from new finished jobs", registry=r
        )
        self.rounds = Counter("teiresias_rounds", "Controller rounds completed", registry=r)
        self.round_failures = Counter("teiresias_round_failures", "Rounds that did not complete", ["why"], registry=r)
        for counter, values in (
            (self.preemptions, PREEMPTION_REASONS),
            (self.requeues, REQUEUE_REASONS),
            (self.failed, ACTIONS),
            (self.round_failures, ROUND_FAILURES),
        ):
            for v in values:
                counter.labels(v)
        Info("teiresias_build", "The controller's version", registry=r).info(_build())
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        if GC_COLLECTOR is not None:
            GCCollector(registry=r)
        r.register(_StateCollector(self))

    def observe_round(
        self,
        result: RoundResult,
        records: Mapping[int, JobRecord],
        finished: Iterable[JobRecord],
        now: float,
        vcs: list[tuple[str, int, int, int]] | None = None,
        migrated: Iterable[int] = (),
        ended: float | None = None,
    ) -> None:
        """``records``: every record the round saw (finished ones included); ``finished``: those
        that ended in this round; ``vcs``: (name, quota, guaranteed, opportunistic GPUs);
        ``ended``: when the round ended (default: now), after its last audit line, so that
        audit lines up to it are exactly those of the rounds counted here."""
        self.rounds.inc()
        self.round_time.observe(result.timings.get("total_s", 0.0))
        self.poll_time.observe(result.timings.get("poll_s", 0.0))
        reasons = result.plan.reasons
        migrated = set(migrated)
        for a in result.actions:
            if a.ok is False:
                self.failed.labels(a.action).inc()
                continue
            if a.ok is None:
                continue  # dry run: nothing happened
            preempted = (
                a.action == "signal"
                or (a.action == "requeue" and "not a tsbatch job" in a.reason)
                or (a.action == "hold" and a.reason == "preempted before Slurm started it")
            )
            if preempted:
                if a.job in migrated:
                    self.migrations.inc()
                self.preemptions.labels(preemption_reason(reasons.get(a.job, ""))).inc()  # type: ignore[call-overload]
            if a.action == "requeue":
                self.requeues.labels(requeue_reason(a.reason)).inc()
                self.lost.inc(float(a.detail.get("lost_gpu_seconds", 0.0)))
        for r in finished:
            jct = (r.end_time or now) - r.submit_time
            self.jct.observe(jct)
            self.queueing.observe(max(0.0, jct - accounting.total_executed(r, r.end_time or now)))
        jobs: dict[tuple[str, str], int] = {}
        attained: list[float] = []
        for r in records.values():
            if not r.active:
                continue
            key = (r.phase.value, f"Q{r.queue + 1}")
            jobs[key] = jobs.get(key, 0) + 1
            attained.append(accounting.attained_gpu_seconds(r, now))
        pl = result.packlimit
        with self._lock:
            self._gauges = _Gauges(
                jobs,
                attained,
                list(vcs or ()),
                (float(pl["value"]), str(pl.get("source", ""))) if pl else None,
                time.time() if ended is None else ended,
            )

    def observe_failure(self, why: str) -> None:
        self.round_failures.labels(why).inc()


def _build() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("teiresias")
    except PackageNotFoundError:
        v = "unknown"
    return {"version": v, "python": platform.python_version()}


def serve(metrics: ControllerMetrics, address: str, port: int) -> Any:
    """Serve /metrics on a daemon thread; returns the server (``shutdown()`` stops it).
    prometheus_client's start_http_server, with a listen backlog of BACKLOG."""
    import socket
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import disable_created_metrics, make_wsgi_app

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        request_queue_size = BACKLOG
        address_family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # a line per scrape would drown the controller's log

    # The *_created series (process start time per counter) only double the series count here.
    disable_created_metrics()
    server = make_server(address, port, make_wsgi_app(metrics.registry), Server, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
