"""The demo charges the simulator the per-run overhead measured live."""

from slurm_plugin.controller.demo import DemoJob, demo_cluster, run_overhead, simulate


def test_run_overhead_is_the_median_per_run_excess():
    # (executed over all runs, work, runs): excess per run 2, 5 (10 over 2 runs), 0 (never negative)
    assert run_overhead([(12.0, 10.0, 1), (30.0, 20.0, 2), (9.0, 10.0, 1)]) == 2.0
    assert run_overhead([(12.0, 10.0, 1), (30.0, 20.0, 2)]) == 3.5
    assert run_overhead([]) == 0.0


def test_simulated_jobs_pay_the_overhead_on_every_run():
    cluster = demo_cluster(["node1"], 2)
    jobs = [DemoJob(0, 0.0, 2, 10.0, "short")]
    assert simulate(jobs, cluster, "fifo", (100.0,), 1.0).avg == 10.0
    assert simulate(jobs, cluster, "fifo", (100.0,), 1.0, overhead=4.0).avg == 14.0
