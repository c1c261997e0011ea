"""Themis with few apps, and inside an app (issue 22 items 6 and 7; docs/themis.md "The round").

Item 6: with two apps, ceil((1 - f) N) = 1 bidder, chosen by app name on equal rho, took the
whole cluster for a lease. Now at least two apps bid, the proportional-fair split serves every
bidder it can (an app with no GPUs has an unbounded rho, Themis §3.3.2), and what the hidden
payment leaves goes toward equal rho.
Item 7: 2D-LAS order inside an app preempted some of its jobs at a lease end to run others of
the same app, its share unchanged. Now an app's running jobs come first in its own order, so
they are kept unless its share shrinks.
"""

from __future__ import annotations

from collections import defaultdict

from teiresias.domain import Cluster, JobId, Plan, Snapshot
from teiresias.policy.registry import build_policy
from teiresias.policy.themis.apps import app_of
from teiresias.simulator import SimulationOptions, Simulator
from teiresias.simulator.trace import TraceJob

C16 = Cluster.from_tiresias_spec(1, 4, 4)
OPT = SimulationOptions(record_timeline=False, progress=False)


def two_apps() -> list[TraceJob]:
    """2 apps x 6 x 4-GPU jobs of 3,000 s at t = 0 on 16 GPUs: fair is 8 GPUs each, all along."""
    return [TraceJob(a * 6 + k, 4, 0.0, 3000.0, "m", app=f"app{a}") for a in range(2) for k in range(6)]


class Watch:
    """Records, per round, each app's GPUs before and after the plan, and what it preempted."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.rounds: list[tuple[float, dict[str, int], dict[str, int], list[JobId]]] = []
        self.real = policy.decide
        policy.decide = self.decide

    def decide(self, snapshot: Snapshot) -> Plan:
        plan = self.real(snapshot)
        before: dict[str, int] = defaultdict(int)
        after: dict[str, int] = defaultdict(int)
        for j in snapshot.jobs:
            if j.is_running:
                before[app_of(j)] += j.num_gpus
            if (j.is_running and j.job_id not in plan.preempt) or j.job_id in plan.start:
                after[app_of(j)] += j.num_gpus
        self.rounds.append((snapshot.now, dict(before), dict(after), list(plan.preempt)))
        return plan


def test_two_apps_of_equal_rho_split_the_cluster() -> None:
    """b9c4356: max rho 1.18 (one app took the whole cluster for a lease, by name); gandiva 1.00."""
    policy = build_policy("themis")
    watch = Watch(policy)
    res = Simulator(two_apps(), C16, policy, OPT).run()
    assert res.summary.max_rho <= 1.02, res.summary.app_rho
    # Every round while both apps have work left, each holds half the cluster.
    both = [(now, after) for now, _, after, _ in watch.rounds if now < 8000]
    assert all(after == {"app0": 8, "app1": 8} for _, after in both), both[:5]


def test_an_apps_running_jobs_are_kept_unless_its_share_shrinks() -> None:
    """One app, eight 4-GPU jobs of 3,000 s on 16 GPUs, 600-s leases: b9c4356 preempted its running
    jobs at lease ends to run its waiting ones (2D-LAS inside the app), its share unchanged."""
    trace = [TraceJob(k, 4, 0.0, 3000.0, "m", app="search") for k in range(8)]
    policy = build_policy("themis")
    res = Simulator(trace, C16, policy, OPT).run()
    assert sum(r.preemptions for r in res.records) == 0
    assert sorted(r.end for r in res.records) == [3000.0] * 4 + [6000.0] * 4


def test_a_preempted_job_is_one_whose_app_lost_gpus() -> None:
    """Two apps whose shares change as jobs end and a third app arrives: every preemption takes
    GPUs from the preempted job's app."""
    trace = [TraceJob(k, 4, 0.0, 2000.0 + 500 * k, "m", app="a") for k in range(5)]
    trace += [TraceJob(10 + k, 2, 0.0, 1500.0 + 300 * k, "m", app="b") for k in range(6)]
    trace += [TraceJob(20 + k, 4, 2500.0, 1800.0, "m", app="c") for k in range(3)]
    policy = build_policy("themis")
    watch = Watch(policy)
    res = Simulator(trace, C16, policy, OPT).run()
    assert len(res.records) == len(trace)
    apps = {t.job_id: t.app for t in trace}
    preempting = [(now, b, a, p) for now, b, a, p in watch.rounds if p]
    assert preempting, "the arrival of app c takes GPUs from someone"
    for now, before, after, preempted in preempting:
        for j in preempted:
            app = apps[int(j)]
            assert after.get(app, 0) < before.get(app, 0), (now, app, before, after)
