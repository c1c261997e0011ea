"""Building policies by name, and parameter validation."""

import pytest

from teiresias.errors import ConfigError
from teiresias.policy.base import PlacementPolicy, SchedulingPolicy
from teiresias.policy.gittins import ServiceDistribution
from teiresias.policy.registry import (
    PLACEMENT_NAMES,
    POLICY_NAMES,
    PolicyParams,
    build_placement,
    build_policy,
)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_name_builds_a_policy_of_that_name(name) -> None:
    p = build_policy(name, PolicyParams(distribution=ServiceDistribution.from_values([1.0])))
    assert isinstance(p, SchedulingPolicy) and p.name == name


@pytest.mark.parametrize("name", PLACEMENT_NAMES)
def test_every_placement_name_builds(name) -> None:
    p = build_placement(name)
    assert isinstance(p, PlacementPolicy) and p.name == name


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown policy 'tiresias'; choose one of: fifo, best-effort"):
        build_policy("tiresias")
    with pytest.raises(ConfigError, match="unknown placement 'pack'; choose one of: consolidate, spread, profile"):
        build_policy("las", PolicyParams(placement="pack"))


@pytest.mark.parametrize("queues", [(100.0, 100.0), (200.0, 100.0), (0.0,), (-5.0,)])
def test_thresholds_must_be_positive_and_strictly_increasing(queues) -> None:
    with pytest.raises(ConfigError, match="strictly increasing"):
        PolicyParams(queues=queues)


def test_other_parameters_are_checked() -> None:
    with pytest.raises(ConfigError, match="promote knob"):
        PolicyParams(promote_knob=-1.0)
    with pytest.raises(ConfigError, match="packlimit"):
        PolicyParams(packlimit=-0.1)
    assert PolicyParams(queues=[10, 20]).queues == (10.0, 20.0)


def test_oracle_names_are_the_policies_that_need_durations() -> None:
    from teiresias.domain import Cluster, Job, JobId, Snapshot
    from teiresias.policy.registry import ORACLE_NAMES

    snap = Snapshot(0.0, Cluster.from_tiresias_spec(1, 1, 1), [Job(JobId(1), 1, 0.0)])  # no duration
    dist = ServiceDistribution.from_values([1.0])
    for name in POLICY_NAMES:
        policy = build_policy(name, PolicyParams(distribution=dist))
        if name in ORACLE_NAMES:
            with pytest.raises(ConfigError):
                policy.decide(snap)
        else:
            policy.decide(snap)
