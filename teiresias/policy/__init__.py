"""Scheduling and placement policies (pure; see ``teiresias.policy.base``)."""

from teiresias.policy.base import PlacementPolicy, SchedulingPolicy

__all__ = ["PlacementPolicy", "SchedulingPolicy"]
