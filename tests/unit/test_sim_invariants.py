"""Property test: whatever the trace, policy, placement and overhead, a replay
finishes every job and conserves GPU-time.

Conservation (no placement slowdown): the GPU-seconds the engine saw
allocated equal sum(gpus x (duration + overhead charged)) exactly, so no job
ran on GPUs it did not hold, or held GPUs without being charged.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teiresias.domain import Cluster
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import POLICY_NAMES, SHARING_NAMES, PolicyParams, build_policy
from teiresias.simulator import SimulationOptions, SlowdownTable, TraceJob, run

jobs_st = st.lists(
    st.tuples(st.sampled_from([1, 1, 2, 3, 4, 8]), st.integers(0, 400), st.integers(1, 600)),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=jobs_st,
    # Sharing policies slow shared jobs down by design (tests/unit/test_sjf_bsbf_sim.py checks them;
    # gandiva's packing and suspended jobs: tests/unit/test_gandiva_sim.py).
    policy=st.sampled_from([n for n in POLICY_NAMES if n not in SHARING_NAMES and n != "gandiva"]),
    placement=st.sampled_from(["consolidate", "spread", "profile"]),
    overhead=st.sampled_from([0.0, 7.0]),
    # Intervals longer than the overhead: with a 1 s interval and a 7 s restore,
    # continuous priorities livelock by construction (see the test below).
    interval=st.sampled_from([0.0, 10.0, 30.0]),
    continuous=st.booleans(),
    promote=st.sampled_from([None, 1.0]),
)
def test_every_job_finishes_and_gpu_time_is_conserved(rows, policy, placement, overhead, interval, continuous, promote):
    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    trace = [TraceJob(i, g, float(s), float(d), "vgg16") for i, (g, s, d) in enumerate(rows)]
    params = PolicyParams(
        queues=(100.0,),
        placement=placement,
        continuous=continuous,
        promote_knob=promote,
        distribution=ServiceDistribution([50, 200, 800, 2000]),
    )
    opt = SimulationOptions(interval=interval, preempt_overhead=overhead, slowdown=SlowdownTable.none())
    res = run(trace, cluster, build_policy(policy, params), opt)
    assert sorted(r.job_id for r in res.records) == list(range(len(rows)))
    by_id = {tj.job_id: tj for tj in trace}
    for r in res.records:
        tj = by_id[r.job_id]
        assert r.start >= tj.submit_time and r.queue_delay >= -1e-6
        assert r.jct == pytest.approx(r.queue_delay + tj.duration + r.overhead, abs=1e-6)
        # At most one restore per preemption (less when a restore was cut short).
        assert -1e-9 <= r.overhead <= overhead * r.preemptions + 1e-9
    s = res.summary
    busy = s.gpu_utilization * cluster.total_gpus * s.makespan
    expected = sum(by_id[r.job_id].num_gpus * (by_id[r.job_id].duration + r.overhead) for r in res.records)
    assert busy == pytest.approx(expected, rel=1e-9, abs=1e-6)
    assert 0.0 < s.gpu_utilization <= 1.0 + 1e-9


def test_thrashing_continuous_priorities_fail_instead_of_looping():
    """Continuous 2D-LAS re-ranks every second; each resumed job needs a 7 s
    restore and is preempted after 1 s, so nobody ever progresses (why Tiresias
    discretizes priorities, §3.2.3). The replay must say so, not spin."""
    from teiresias.simulator import SimulationError

    cluster = Cluster.from_tiresias_spec(1, 2, 4)
    trace = [TraceJob(i, 4, 0.0, 100.0) for i in range(4)]
    opt = SimulationOptions(interval=1.0, preempt_overhead=7.0, slowdown=SlowdownTable.none())
    with pytest.raises(SimulationError, match="no job made progress"):
        run(trace, cluster, build_policy("las", PolicyParams(continuous=True)), opt)
    # The same workload with queues finishes: discretization bounds the preemptions.
    res = run(trace, cluster, build_policy("las", PolicyParams(queues=(100.0,))), opt)
    assert res.summary.jobs == 4 and res.summary.preemptions <= 4
