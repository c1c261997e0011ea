"""The allocation walk's shortcuts (failure memo, binary search for victims)
must not change a single decision: compare against a placement that offers
no ``job_key``, so nothing is memoized."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from teiresias.policy.registry import PLACEMENT_NAMES, POLICY_NAMES, PolicyParams, build_placement, build_policy
from tests.unit.test_policy_contract import DIST, random_snapshot


class NoMemo:
    """The same placement, without the job_key hook."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name

    def place(self, job, free, cluster):
        return self.inner.place(job, free, cluster)


@settings(max_examples=60, deadline=None)
@given(
    rng=st.randoms(use_true_random=False),
    name=st.sampled_from(POLICY_NAMES),
    placement=st.sampled_from(PLACEMENT_NAMES),
)
def test_memoized_walk_decides_exactly_as_the_plain_walk(rng: random.Random, name, placement) -> None:
    snap = random_snapshot(rng)
    params = PolicyParams(queues=(100.0, 1000.0), promote_knob=2.0, distribution=DIST, placement=placement)
    fast = build_policy(name, params)
    slow = build_policy(name, params)
    slow.placement = NoMemo(build_placement(placement))
    assert fast.decide(snap) == slow.decide(snap)
