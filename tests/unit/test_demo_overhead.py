"""The demo charges the simulator the per-run overhead measured live."""

from slurm_plugin.controller.demo import DemoJob, demo_cluster, run_overhead, simulate


def test_run_overhead_pools_the_excess_over_all_runs():
    # (executed over all runs, work, runs): 2 + 10 - 1 = 11 s of excess over 4 runs
    assert run_overhead([(12.0, 10.0, 1), (30.0, 20.0, 2), (9.0, 10.0, 1)]) == 2.75
    assert run_overhead([(12.0, 10.0, 1), (30.0, 20.0, 2)]) == 4.0
    assert run_overhead([(9.0, 10.0, 1)]) == 0.0  # never negative
    assert run_overhead([]) == 0.0


def test_whole_second_times_do_not_round_the_overhead_to_0_or_1():
    """Slurm's whole-second times put each job's excess at floor(true) or floor(true) + 1;
    a true 0.6 s per run must come out near 0.6, not 0 or 1 (the median did)."""
    true = 0.6
    runs = []
    for k in range(40):
        start = k * 0.37 % 1.0  # where in its second each run began
        runs.append((float(int(start + 10.0 + true) - int(start)), 10.0, 1))
    assert abs(run_overhead(runs) - true) < 0.1


def test_simulated_jobs_pay_the_overhead_on_every_run():
    cluster = demo_cluster(["node1"], 2)
    jobs = [DemoJob(0, 0.0, 2, 10.0, "short")]
    assert simulate(jobs, cluster, "fifo", (100.0,), 1.0).avg == 10.0
    assert simulate(jobs, cluster, "fifo", (100.0,), 1.0, overhead=4.0).avg == 14.0
