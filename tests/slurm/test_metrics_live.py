"""/metrics of a real controller process on the real local Slurm cluster, scraped over
HTTP (loopback only) while it runs, and checked against its audit log."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_plugin.controller.state import Phase
from tests.helpers import poll
from tests.slurm.controller_support import submit_protocol_job, submit_sleep

pytestmark = pytest.mark.slurm

# Inside the test clusters' port range, on no other cluster's port (docs/local-cluster.md:
# +17 and +18 are test_gandiva_live.py's gandiva-el cluster, kept up with KEEP=1).
PORT = int(os.environ.get("TEIRESIAS_TEST_CLUSTER_PORT_BASE", "17100")) + 19


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(m: dict, name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in m.items() if n == name and all(dict(lab).get(k) == x for k, x in labels.items()))


def test_metrics_scraped_during_a_live_run_match_the_audit_log(cluster, make_controller, tmp_path):
    ctl = make_controller(policy={"name": "las", "queues": [8]}, metrics={"address": "127.0.0.1", "port": PORT})
    ctl.start()
    first = poll("the controller serves /metrics", lambda: scrape(PORT), 30)
    assert total(first, "teiresias_jobs") == 0
    # Four 4-GPU jobs fill the cluster and drop to Q2 (4 GPUs x 2 s > 8 GPU-s); a short
    # 2-GPU job then preempts one of them (checkpoint acknowledged) and finishes.
    old = [submit_protocol_job(cluster, tmp_path, 4, name=f"old{i}") for i in range(4)]
    for j in old:
        cluster.wait_for(j, "RUNNING", timeout=30)
    poll("old jobs demoted to Q2", lambda: all(ctl.rec(j).queue == 1 for j in old), 30)
    short = submit_sleep(cluster, 2, 3)
    poll("the short job finished", lambda: ctl.audit(short, "finished"), 60)
    poll("a preempted job requeued", lambda: ctl.audit(action="requeue"), 60)

    done = ctl.audit(short, "finished")[0]["time"]
    m = poll(
        "a scrape after the round that finished the short job",
        lambda: (m := scrape(PORT)) is not None and total(m, "teiresias_last_round_timestamp_seconds") >= done and m,
        30,
    )
    # A scrape may fall in the middle of a round whose audit lines are written but whose
    # metrics are not: compare with the lines written up to the end of the last round counted.
    ended = total(m, "teiresias_last_round_timestamp_seconds")
    audit = [e for e in ctl.audit() if e["time"] <= ended + 0.001]
    finished = [e for e in audit if e["action"] == "finished"]
    assert finished and total(m, "teiresias_job_completion_seconds_count") == len(finished)
    assert total(m, "teiresias_job_completion_seconds_sum") == pytest.approx(sum(e["jct"] for e in finished), abs=0.01)
    assert total(m, "teiresias_job_queueing_delay_seconds_sum") == pytest.approx(
        sum(e["queueing_delay"] for e in finished), abs=0.01
    )
    signals = [e for e in audit if e["action"] == "signal"]
    assert signals and total(m, "teiresias_preemptions_total") == len(signals)
    assert total(m, "teiresias_preemptions_total", reason="priority") == len(
        [e for e in signals if e["reason"].startswith("preempted by higher-priority job")]
    )
    requeues = [e for e in audit if e["action"] == "requeue"]
    assert total(m, "teiresias_requeues_total") == len(requeues)
    assert total(m, "teiresias_requeues_total", reason="checkpoint") == len([e for e in requeues if e["acked"]])
    assert total(m, "teiresias_failed_actions_total") == len([e for e in audit if e["action"].endswith("-failed")])
    # The gauges are the state of the last round; the records in the DB are the same round's.
    recs = [r for r in ctl.records().values() if r.active]
    for phase in (Phase.RUNNING, Phase.PENDING):
        assert total(m, "teiresias_jobs", phase=phase.value) == len([r for r in recs if r.phase is phase])
    assert total(m, "teiresias_attained_gpu_seconds_count") == len(recs)
    assert total(m, "teiresias_attained_gpu_seconds_bucket", le="8.0") <= len(recs) - 3  # three olds still run in Q2
    rounds = total(m, "teiresias_rounds_total")
    assert rounds >= 5 and total(m, "teiresias_round_duration_seconds_count") == rounds
    assert total(m, "teiresias_slurm_poll_seconds_count") == rounds
    assert total(m, "teiresias_packlimit") > 0
    assert ctl.alive()
    # Loopback only: the address in the config is the one bound.
    assert f"metrics served on http://127.0.0.1:{PORT}/metrics" in ctl.logtext()


def test_a_taken_metrics_port_is_exit_2_and_one_line(cluster, make_controller):
    import socket
    import subprocess

    from tests.slurm.controller_support import REPO, TEIRESIAS

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", PORT))
        s.listen()
        ctl = make_controller(metrics={"port": PORT})
        p = subprocess.run(
            [*TEIRESIAS, "controller", "run", "-c", str(ctl.config)],
            capture_output=True,
            text=True,
            env=cluster.env,
            cwd=REPO,
            timeout=60,
        )
    assert p.returncode == 2, p.stderr
    err = [line for line in p.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and f"cannot listen on 127.0.0.1:{PORT}" in err[0] and "Traceback" not in p.stderr


def test_vc_metrics_match_the_cells_file_and_the_jobs_slurm_runs(cluster, make_controller, tmp_path):
    import yaml

    cells = {
        "cell_types": {
            "gpu": {},
            "gpu-pair": {"child": "gpu", "count": 2},
            "node": {"child": "gpu-pair", "count": 2, "node": True},
        },
        "physical_cells": [{"type": "node", "nodes": [f"node{i}"]} for i in range(1, 5)],
        "virtual_clusters": {
            "vc-a": {"accounts": ["team-a"], "quota": {"node": 1}},
            "vc-b": {"accounts": ["team-b"], "quota": {"gpu-pair": 1}},
        },
    }
    (tmp_path / "cells.yaml").write_text(yaml.safe_dump(cells))
    make_controller(cells=str(tmp_path / "cells.yaml"), metrics={"port": PORT}).start()
    a = submit_sleep(cluster, 4, 600, "gpu", "--account=team-a")
    b = [submit_sleep(cluster, 2, 600, "gpu", "--account=team-b") for _ in range(2)]  # one beyond its quota
    for j in (a, *b):
        cluster.wait_for(j, "RUNNING", timeout=30)

    def settled():
        m = scrape(PORT)
        # The plan's round shows them STARTING; the next one RUNNING.
        return m if m is not None and total(m, "teiresias_jobs", phase="RUNNING") == 3 else None

    m = poll("a round that saw all three run", settled, 30)
    assert total(m, "teiresias_vc_used_gpus") == 8
    assert total(m, "teiresias_vc_guaranteed_gpus", vc="vc-a") == 4
    assert total(m, "teiresias_vc_guaranteed_gpus", vc="vc-b") == 2
    assert total(m, "teiresias_vc_used_gpus", vc="vc-a", kind="guaranteed") == 4
    assert total(m, "teiresias_vc_used_gpus", vc="vc-b", kind="guaranteed") == 2
    assert total(m, "teiresias_vc_used_gpus", vc="vc-b", kind="opportunistic") == 2
