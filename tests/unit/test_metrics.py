"""Prometheus metrics of the controller (fast tests; the live scrape is tests/slurm/test_metrics_live.py),
the `metrics:` config key, and the Grafana dashboard shipped in etc/grafana/."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_plugin.backends.base import SlurmNode
from slurm_plugin.config import MetricsConfig, parse_config
from slurm_plugin.controller.audit import AuditLog
from slurm_plugin.controller.enact import Action
from slurm_plugin.controller.loop import Controller, RoundResult
from slurm_plugin.controller.metrics import (
    METRIC_NAMES,
    PROCESS_NAMES,
    ControllerMetrics,
    preemption_reason,
    requeue_reason,
    serve,
)
from slurm_plugin.controller.state import JobRecord, Phase, StateStore
from teiresias.domain import Plan
from teiresias.errors import ConfigError
from tests.conftest import REPO
from tests.unit.round_support import NoBackend, held_job

DASHBOARD = REPO / "etc" / "grafana" / "teiresias-dashboard.json"


def samples(metrics: ControllerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def rec(job_id: int, phase: Phase, queue: int = 0, gpus: int = 2, **kw) -> JobRecord:
    return JobRecord(job_id=job_id, gpus=gpus, phase=phase, queue=queue, submit_time=100.0, **kw)


def test_one_round_sets_every_kind_of_metric():
    m = ControllerMetrics(queue_thresholds=(8.0,))
    plan = Plan(preempt=(2,), reasons={2: "preempted by higher-priority job 1"})
    actions = [
        Action(2, "signal", "preempted"),
        Action(3, "requeue", "checkpoint acknowledged (step 4, 1.0s, 9 B)"),
        Action(4, "start", "Q1", ok=False),
        Action(5, "requeue", "x; not a tsbatch job: requeued without a checkpoint", detail={"lost_gpu_seconds": 80.0}),
    ]
    result = RoundResult(
        200.0,
        7,
        False,
        plan,
        actions,
        timings={"poll_s": 0.03, "total_s": 0.2},
        packlimit={"value": 0.4, "source": "history"},
    )
    records = {
        1: rec(1, Phase.RUNNING, run_start=190.0, run_restart=0),  # 2 GPUs x 10 s = 20 GPU-s
        2: rec(2, Phase.PREEMPTING, queue=1, closed_run_seconds=3.0),
        6: rec(6, Phase.PENDING, queue=1, closed_run_seconds=5.0),
    }
    done = rec(9, Phase.FINISHED, closed_run_seconds=30.0, end_time=160.0, final_state="COMPLETED")
    m.observe_round(result, {**records, 9: done}, [done], 200.0, [("vc1", 8, 4, 2)], ended=200.5)
    s = samples(m)
    assert s[("teiresias_jobs", (("phase", "RUNNING"), ("queue", "Q1")))] == 1
    assert s[("teiresias_jobs", (("phase", "PENDING"), ("queue", "Q2")))] == 1
    assert ("teiresias_jobs", (("phase", "FINISHED"), ("queue", "Q1"))) not in s
    # attained: 20, 6, 10 GPU-s; the queue threshold 8 is a bucket of its own
    assert s[("teiresias_attained_gpu_seconds_bucket", (("le", "8.0"),))] == 1
    assert s[("teiresias_attained_gpu_seconds_bucket", (("le", "60.0"),))] == 3
    assert s[("teiresias_attained_gpu_seconds_sum", ())] == pytest.approx(36.0)
    assert s[("teiresias_preemptions_total", (("reason", "priority"),))] == 1
    assert s[("teiresias_preemptions_total", (("reason", "other"),))] == 1  # job 5: plain sbatch, requeued at once
    assert s[("teiresias_requeues_total", (("reason", "checkpoint"),))] == 1
    assert s[("teiresias_requeues_total", (("reason", "no-checkpoint"),))] == 1
    assert s[("teiresias_lost_gpu_seconds_total", ())] == 80.0  # issue 20 B12: job 5's run since its start
    assert s[("teiresias_failed_actions_total", (("action", "start"),))] == 1
    assert s[("teiresias_job_completion_seconds_count", ())] == 1
    assert s[("teiresias_job_completion_seconds_sum", ())] == 60.0  # 160 - 100
    assert s[("teiresias_job_queueing_delay_seconds_sum", ())] == 30.0  # 60 - 30 s run
    assert s[("teiresias_round_duration_seconds_count", ())] == 1
    assert s[("teiresias_slurm_poll_seconds_bucket", (("le", "0.05"),))] == 1
    assert s[("teiresias_slurm_poll_seconds_bucket", (("le", "0.025"),))] == 0
    assert s[("teiresias_vc_guaranteed_gpus", (("vc", "vc1"),))] == 8
    assert s[("teiresias_vc_used_gpus", (("kind", "opportunistic"), ("vc", "vc1")))] == 2
    assert s[("teiresias_packlimit", (("source", "history"),))] == 0.4
    assert s[("teiresias_last_round_timestamp_seconds", ())] == 200.5
    assert s[("teiresias_rounds_total", ())] == 1


def test_dry_run_actions_are_not_counted():
    m = ControllerMetrics()
    m.observe_round(RoundResult(1.0, 1, True, Plan(), [Action(1, "signal", "x", ok=None)]), {}, [], 1.0)
    assert samples(m)[("teiresias_preemptions_total", (("reason", "other"),))] == 0


def test_every_exported_name_is_listed_and_no_series_names_a_job():
    m = ControllerMetrics()
    m.observe_round(RoundResult(1.0, 1, False, Plan(), []), {5: rec(5, Phase.PENDING, user="alice")}, [], 1.0)
    text = generate_latest(m.registry).decode()
    names = {fam.name for fam in text_string_to_metric_families(text) if not fam.name.endswith("_created")}
    base = {n.removesuffix("_total") for n in (*METRIC_NAMES, *PROCESS_NAMES)}
    assert names == base
    assert "alice" not in text and 'job="' not in text


def test_reason_categories_are_bounded():
    assert preemption_reason("preempted by higher-priority job 12") == "priority"
    assert preemption_reason("migrated to node3: its VC's cells are rebound ...") == "migration"
    assert preemption_reason("opportunistic job preempted for guaranteed job 4 of VC a") == "vc-guarantee"
    assert preemption_reason("anything else 123") == "other"
    assert requeue_reason("no acknowledgement within the 30s grace time") == "grace-timeout"
    assert requeue_reason("checkpoint acknowledged (step 1, 0.1s, 5 B)") == "checkpoint"


def test_serve_answers_over_http_on_loopback():
    m = ControllerMetrics()
    server = serve(m, "127.0.0.1", 0)  # port 0: any free port (the live test uses the configured one)
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    assert "teiresias_rounds_total 0.0" in body


def test_series_are_at_zero_before_anything_happened():
    """Issue 21 item 7: with nothing queued there was no teiresias_jobs at all, and a
    labelled counter appeared only at its first event (absent != 0 for alerts and rate())."""
    got = samples(ControllerMetrics([3600]))
    for phase in ("PENDING", "STARTING", "RUNNING", "PREEMPTING"):
        for queue in ("Q1", "Q2"):
            assert got[("teiresias_jobs", (("phase", phase), ("queue", queue)))] == 0
    assert got[("teiresias_preemptions_total", (("reason", "priority"),))] == 0
    assert got[("teiresias_requeues_total", (("reason", "checkpoint"),))] == 0
    assert got[("teiresias_failed_actions_total", (("action", "start"),))] == 0
    assert got[("teiresias_round_failures_total", (("why", "slurm-unreachable"),))] == 0


def test_build_info_and_the_process_metrics_are_exported():
    got = samples(ControllerMetrics())
    (build,) = [k for k in got if k[0] == "teiresias_build_info"]
    assert dict(build[1])["version"] and got[build] == 1
    assert got[("process_resident_memory_bytes", ())] > 0 and ("process_cpu_seconds_total", ()) in got


def test_the_listen_backlog_takes_a_burst_of_scrapes():
    """Issue 21 item 7: socketserver's backlog of 5 made 40 of 200 concurrent scrapes time
    out. The kernel's own view of the socket (ss: Send-Q of a listener is its backlog),
    then 200 scrapes at once, all answered."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    server = serve(ControllerMetrics(), "127.0.0.1", 0)
    try:
        port = server.server_address[1]
        ss = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True)
        backlog = int(ss.stdout.split()[2])
        assert backlog >= 128, ss.stdout

        def scrape(_: int) -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as r:
                return r.status

        with ThreadPoolExecutor(200) as pool:
            assert list(pool.map(scrape, range(200))) == [200] * 200
    finally:
        server.shutdown()


# ------------------------------------------------------------------ config


def test_metrics_are_off_by_default_and_loopback_when_on():
    assert parse_config({}).metrics is None
    assert parse_config({"metrics": None}).metrics == MetricsConfig("127.0.0.1", 9464)
    assert parse_config({"metrics": {"port": 17970, "address": "0.0.0.0"}}).metrics == MetricsConfig("0.0.0.0", 17970)


@pytest.mark.parametrize(
    "bad, msg",
    [
        ({"metrics": {"prot": 1}}, "metrics.prot"),
        ({"metrics": {"port": 70000}}, "metrics.port: must be a TCP port"),
        ({"metrics": {"port": "x"}}, "metrics.port: must be a whole number"),
        ({"metrics": 5}, "metrics: must be a mapping"),
    ],
)
def test_bad_metrics_config_names_the_key(bad, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        parse_config(bad, "t.yaml")


# ------------------------------------------------------------------ the loop's hooks


def test_controller_round_feeds_its_metrics(tmp_path):
    cfg = parse_config({"state_db": str(tmp_path / "s.db"), "audit_log": str(tmp_path / "a.jsonl")})
    ctl = Controller(cfg, NoBackend(), StateStore(cfg.state_db), AuditLog(cfg.audit_log))
    ctl.metrics = ControllerMetrics(cfg.policy.queues)
    sj = held_job(3)
    ctl.round(now=200.0, slurm_jobs=[sj], slurm_nodes=[SlurmNode("n1", frozenset({"IDLE", "DRAIN"}), 4, 0, ("gpu",))])
    s = samples(ctl.metrics)
    assert s[("teiresias_jobs", (("phase", "PENDING"), ("queue", "Q1")))] == 1
    assert s[("teiresias_rounds_total", ())] == 1


# ------------------------------------------------------------------ Grafana


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bteiresias_[a-z_]+", expr))


def _base(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in METRIC_NAMES:
            return name.removesuffix(suffix)
    return name


def test_grafana_dashboard_is_json_and_every_expr_names_an_exported_metric():
    d = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10 and all(p.get("title") for p in d["panels"])
    used = set()
    for e in exprs:
        names = _metric_names(e)
        assert names, f"panel expr {e!r} names no teiresias metric"
        for n in names:
            assert _base(n) in METRIC_NAMES, f"panel expr {e!r}: {n} is not exported (metrics.METRIC_NAMES)"
            used.add(_base(n))
    # The dashboard shows everything the issue asked for.
    assert {
        "teiresias_jobs",
        "teiresias_preemptions_total",
        "teiresias_job_completion_seconds",
        "teiresias_vc_used_gpus",
        "teiresias_packlimit",
        "teiresias_gittins_refits_total",
    } <= used


def test_the_dashboard_check_catches_a_misspelt_metric():
    assert _base("teiresias_round_duration_seconds_bucket") == "teiresias_round_duration_seconds"
    assert _base("teiresias_round_duraton_seconds_bucket") not in METRIC_NAMES
