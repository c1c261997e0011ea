"""Gandiva (OSDI'18): time-slicing, packing, migration and grow-shrink (docs/gandiva.md)."""

from teiresias.policy.gandiva.params import GandivaParams
from teiresias.policy.gandiva.policy import GandivaPolicy

__all__ = ["GandivaParams", "GandivaPolicy"]
