"""The soak's short form (issue 20 A): a seeded random workload of the whole
everyday sbatch grammar, three users, real faults (controller kill -9,
slurmctld stop/start, a node drained and resumed, a rival controller on its own
state DB) on a 4 x 4 cluster of its own with accounting, then every invariant
of tests/soak/invariants.py checked from sacct, the audit log and the state DB.

Its cluster: folder TEIRESIAS_TEST_CLUSTER_DIR-soak, ports
TEIRESIAS_TEST_CLUSTER_PORT_BASE+60 .. +66 (docs/local-cluster.md). A failure
prints each violation with its job, the seed and the job's events; the same
workload replays with ``scripts/soak --seed SEED --minutes 2 --jobs 30
--torch-jobs 1`` (the long form: docs/benchmarks.md "Soak").
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import own_cluster, test_cluster_config
from tests.soak.collect import load
from tests.soak.driver import Driver, SoakConfig, soak_cluster_config
from tests.soak.invariants import check
from tests.soak.report import format_summary, format_violation, summary
from tests.soak.workload import generate

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SEED = int(os.environ.get("TEIRESIAS_SOAK_SEED", "20"))
MINUTES, JOBS, TORCH_JOBS = 2.0, 30, 1
# After the last action the driver waits for the queue to drain: at most this long.
SHORT = SoakConfig(drain_s=40.0, drain_cap_s=100.0)


@pytest.fixture(scope="module")
def soak_cluster():
    if not shutil.which("useradd") or not shutil.which("runuser") or not Path("/usr/bin/python3").exists():
        pytest.skip("the soak needs useradd, runuser and /usr/bin/python3 (its users run tsbatch with it)")
    base = test_cluster_config()
    cfg = soak_cluster_config(Path(f"{base.dir}-soak"), base.port_base + 60)
    with own_cluster(cfg) as c:
        yield c.cluster


def test_the_short_soak_keeps_every_invariant(soak_cluster):
    w = generate(SEED, duration_s=MINUTES * 60, jobs=JOBS, torch_jobs=TORCH_JOBS)
    run_dir = soak_cluster.cfg.dir / "runs" / f"seed{SEED}-{int(time.time())}"
    run_dir.mkdir(parents=True)
    Driver(w, soak_cluster, run_dir, SHORT).run()
    obs = load(run_dir)
    res = check(obs)
    s = summary(obs, res)
    assert all(n > 0 for n in res.checks.values()), f"an invariant was never exercised: {res.checks}"
    assert sum(s["faults"].values()) >= 4 and s["rounds"] > 0
    assert not res.violations, "\n\n".join(
        [*(format_violation(obs, v) for v in res.violations[:40]), format_summary(s), f"run folder: {run_dir}"]
    )
