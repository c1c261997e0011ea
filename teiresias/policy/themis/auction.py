"""The partial-allocation auction of Themis (Pseudocode 1, lines 5-12), solved as a MILP with HiGHS.

Bids are bounded on purpose: an app bids rho for each *level* of its own job
order (its first m jobs, so every level is a GPU count its jobs can use
all-or-nothing), at most ``MAX_LEVELS`` levels, and GPUs are counted per node,
not named one by one. The proportional-fair allocation maximizes
prod 1/rho_i, i.e. sum log(1/rho_i), over:

- y[i,l] in {0,1}: app i gets level l (exactly one level, level 0 = nothing);
- x[i,n] in Z>=0: GPUs of node n that app i gets; sum_n x[i,n] = GPUs of its level;
- sum_i x[i,n] <= R_n: no node gives more GPUs than are on auction there.

Hidden payment (Partial Allocation, Cole et al. [5]): app i keeps the fraction
c_i = prod_{j!=i} v_j(G_pf) / prod_{j!=i} v_j(G_pf^{-i}) <= 1 of its
proportional-fair allocation, v = 1/rho and G_pf^{-i} the proportional-fair
allocation of the others without i. (Pseudocode 1, line 8 prints the ratio
upside down; as printed it would be >= 1.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

MAX_LEVELS = 32


@dataclass(frozen=True)
class Bid:
    """rho of an app for each level: ``gpus[l]`` GPUs (gpus[0] = 0), ``rho[l]`` > 0 its valuation's inverse."""

    app: str
    gpus: tuple[int, ...]
    rho: tuple[float, ...]


@dataclass(frozen=True)
class Outcome:
    """Per app: the proportional-fair level, its GPUs, c_i, and the GPUs it keeps (c_i x its pf GPUs)."""

    level: Mapping[str, int]
    pf_gpus: Mapping[str, int]
    fraction: Mapping[str, float]
    granted: Mapping[str, int]


class AuctionError(RuntimeError):
    """HiGHS found no solution to a problem that always has one (every app at level 0)."""


def _solve(bids: Sequence[Bid], capacity: Mapping[str, int]) -> tuple[dict[str, int], float]:
    """The proportional-fair levels of ``bids`` on ``capacity`` and the objective sum log(1/rho)."""
    if not bids:
        return {}, 0.0
    nodes = [n for n, c in capacity.items() if c > 0]
    n_nodes = len(nodes)
    cost: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    c_lo: list[float] = []
    c_hi: list[float] = []
    y_index: list[list[int]] = []
    x_index: list[list[int]] = []
    row = 0
    for b in bids:
        ys = list(range(len(cost), len(cost) + len(b.gpus)))
        for r in b.rho:
            cost.append(math.log(r))  # minimize sum log(rho) = maximize sum log(1/rho)
            lo.append(0.0)
            hi.append(1.0)
        xs = list(range(len(cost), len(cost) + n_nodes))
        for n in nodes:
            cost.append(0.0)
            lo.append(0.0)
            hi.append(float(min(capacity[n], max(b.gpus))))
        y_index.append(ys)
        x_index.append(xs)
        # Exactly one level.
        for v in ys:
            rows.append(row); cols.append(v); vals.append(1.0)
        c_lo.append(1.0); c_hi.append(1.0); row += 1
        # Its nodes' GPUs add up to its level's GPUs.
        for v in xs:
            rows.append(row); cols.append(v); vals.append(1.0)
        for v, g in zip(ys, b.gpus):
            rows.append(row); cols.append(v); vals.append(-float(g))
        c_lo.append(0.0); c_hi.append(0.0); row += 1
    for k, n in enumerate(nodes):
        for xs in x_index:
            rows.append(row); cols.append(xs[k]); vals.append(1.0)
        c_lo.append(-np.inf); c_hi.append(float(capacity[n])); row += 1
    a = coo_matrix((vals, (rows, cols)), shape=(row, len(cost))).tocsr()
    res = milp(
        c=np.asarray(cost),
        constraints=LinearConstraint(a, np.asarray(c_lo), np.asarray(c_hi)),
        integrality=np.ones(len(cost)),
        bounds=Bounds(np.asarray(lo), np.asarray(hi)),
        options={"disp": False, "mip_rel_gap": 1e-6},
    )
    if res.x is None:
        raise AuctionError(f"HiGHS found no allocation ({res.message})")
    levels: dict[str, int] = {}
    value = 0.0
    for b, ys in zip(bids, y_index):
        lv = int(np.argmax(res.x[ys]))
        levels[b.app] = lv
        value -= math.log(b.rho[lv])
    return levels, value


def auction(bids: Sequence[Bid], capacity: Mapping[str, int]) -> Outcome:
    """Pseudocode 1's AUCTION: proportional-fair levels, then each app keeps c_i of its GPUs."""
    levels, _ = _solve(bids, capacity)
    by_app = {b.app: b for b in bids}

    def others_value(lv: Mapping[str, int], without: str) -> float:
        return sum(-math.log(by_app[a].rho[l]) for a, l in lv.items() if a != without)

    pf_gpus = {b.app: b.gpus[levels[b.app]] for b in bids}
    fraction: dict[str, float] = {}
    granted: dict[str, int] = {}
    for b in bids:
        if len(bids) == 1 or pf_gpus[b.app] == 0:
            c = 1.0  # no one else to pay, or nothing won
        else:
            rest = [o for o in bids if o.app != b.app]
            lv_without, _ = _solve(rest, capacity)
            # log c_i = sum_{j!=i} log v_j(with i) - sum_{j!=i} log v_j(without i) <= 0.
            c = math.exp(min(others_value(levels, b.app) - others_value(lv_without, b.app), 0.0))
        fraction[b.app] = c
        granted[b.app] = math.floor(c * pf_gpus[b.app] + 1e-9)
    return Outcome(levels, pf_gpus, fraction, granted)


def bid_levels(levels: Sequence[tuple[int, float]], limit: int) -> list[int]:
    """Which of an app's prefix levels to bid for: those within ``limit`` GPUs, at most MAX_LEVELS - 1
    of them (evenly spread over its jobs when there are more), each a distinct GPU count."""
    usable = [i for i, (g, _) in enumerate(levels) if g <= limit]
    if len(usable) > MAX_LEVELS - 1:
        step = len(usable) / (MAX_LEVELS - 1)
        usable = sorted({usable[min(int(round((k + 1) * step)) - 1, len(usable) - 1)]
                         for k in range(MAX_LEVELS - 1)})
    out: list[int] = []
    seen: set[int] = set()
    for i in usable:
        if levels[i][0] not in seen:
            seen.add(levels[i][0])
            out.append(i)
    return out
