"""The binding state a cells policy hands back each round, for the owner to persist.

Policies are pure, so the virtual -> physical binding does not live in the
policy object. Each round's ``CellPlan.cells`` holds the binding after the
round (which physical cell each bound virtual cell has, and which cells each
running job holds, guaranteed or opportunistic). The controller stores it
(JSON, ``to_json``) and passes it back to ``CellsPolicy.decide_cells`` next
round. Without it (``decide(snapshot)``, e.g. in the simulator) the policy
rebuilds the binding from the running jobs' placements, oldest job first;
the stored state only makes the guaranteed/opportunistic split of running
jobs and the sub-node cells exact across rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teiresias.domain import JobId
from teiresias.errors import ConfigError

META_KEY = "cells_state"
"""Key under which the controller stores ``CellPlan.cells.to_json()`` (as JSON text) in its
state database's ``meta`` table; ``teiresias cells --state DB`` reads it from there."""


@dataclass(frozen=True, slots=True)
class Binding:
    """Virtual cell ``number`` of VC ``vc`` is bound to physical cell ``cell`` (address)."""

    vc: str
    number: int
    cell: str


@dataclass(frozen=True, slots=True)
class JobCells:
    """The cells (addresses) a running job holds, and in which view."""

    job_id: JobId
    vc: str | None
    guaranteed: bool
    cells: tuple[str, ...]


@dataclass(frozen=True)
class CellsState:
    bindings: tuple[Binding, ...] = ()
    jobs: tuple[JobCells, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "bindings": [{"vc": b.vc, "number": b.number, "cell": b.cell} for b in self.bindings],
            "jobs": [
                {"job_id": int(j.job_id), "vc": j.vc, "guaranteed": j.guaranteed, "cells": list(j.cells)}
                for j in self.jobs
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> CellsState:
        """Parse what ``to_json`` wrote; ConfigError (one line) on anything else."""
        try:
            return cls(
                bindings=tuple(Binding(str(b["vc"]), int(b["number"]), str(b["cell"])) for b in data["bindings"]),
                jobs=tuple(
                    JobCells(
                        JobId(int(j["job_id"])),
                        None if j["vc"] is None else str(j["vc"]),
                        bool(j["guaranteed"]),
                        tuple(str(c) for c in j["cells"]),
                    )
                    for j in data["jobs"]
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"cells binding state is malformed ({exc!r}); delete it and the policy rebuilds it "
                "from the running jobs"
            ) from None
