"""Policy ordering on a contended Philly-like trace (Tiresias §5.3, Table 5).

300 jobs whose GPU-time is drawn from the Philly samples shipped in
tests/fixtures/traces (tiresias-yarn-gput1000.csv) at offered load 1.2 on
4 nodes x 8 GPUs, 30 s preemption overhead: 2D-LAS avoids head-of-line
blocking of small/short jobs, so las < best-effort < fifo on average JCT.
The figures at scale are in docs/benchmarks.md (benchmarks/bench_simulator.py).
"""

from pathlib import Path

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import build_policy
from teiresias.simulator import SimulationOptions, run
from teiresias.simulator.synth import PhillyParams, philly_like

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "tiresias-yarn-gput1000.csv"


def test_las_beats_best_effort_beats_fifo_on_a_contended_trace():
    samples = ServiceDistribution.from_samples_file(SAMPLES).samples
    jobs = philly_like(samples, PhillyParams(num_jobs=300, cluster_gpus=32, load=1.2, max_duration=20000), seed=0)
    cluster = Cluster.from_tiresias_spec(1, 4, 8)
    opt = SimulationOptions(interval=60, preempt_overhead=30)
    avg = {p: run(jobs, cluster, build_policy(p), opt).summary for p in ("las", "best-effort", "fifo")}
    assert avg["las"].avg_jct < avg["best-effort"].avg_jct < avg["fifo"].avg_jct, {p: s.avg_jct for p, s in avg.items()}
    # The gain comes from queueing, not from running faster: las preempts, the FIFOs never do.
    assert avg["las"].preemptions > 0 and avg["best-effort"].preemptions == avg["fifo"].preemptions == 0
    assert avg["las"].median_jct < avg["best-effort"].median_jct
