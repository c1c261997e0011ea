"""The partial-allocation auction of Themis (Pseudocode 1, lines 5-12), solved as a MILP with HiGHS.

Bids are bounded on purpose: an app bids rho for each *level* of its own job
order (its first m jobs, so every level is a GPU count its jobs can use
all-or-nothing), at most ``MAX_LEVELS`` levels. The proportional-fair
allocation maximizes prod 1/rho_i, i.e. sum log(1/rho_i), over y[i,l] in
{0,1} (app i gets level l; exactly one level per app, level 0 = nothing) with
sum_{i,l} GPUs(i,l) y[i,l] <= the GPUs on auction: a multiple-choice knapsack.

GPUs are offered per node (``capacity``), but a split of the levels' GPU
counts over the nodes is a transportation problem that always exists when the
total fits, so per-node variables would add nothing but solve time (24 s
instead of 0.1 s with 64 apps bidding on 64 nodes, docs/themis.md); which
GPUs each winning job gets is the placement policy's choice in the walk.

A bidder left with nothing counts as rho = infinity in that maximization
(``NOTHING``): the split serves as many bidders as the GPUs allow first.

Hidden payment (Partial Allocation, Cole et al. [5]): app i keeps the fraction
c_i = prod_{j!=i} v_j(G_pf) / prod_{j!=i} v_j(G_pf^{-i}) <= 1 of its
proportional-fair allocation, v = 1/rho and G_pf^{-i} the proportional-fair
allocation of the others without i. (Pseudocode 1, line 8 prints the ratio
upside down; as printed it would be >= 1.)

GPUs and gang-scheduled jobs are indivisible, so c_i x pf GPUs is kept in
expectation: the app gets the level just above c_i x pf with the probability
that makes its expected GPUs exactly c_i x pf, else the level just below
(``pay``). Rounding down instead, as this module first did, took a 1-level
app's whole allocation whenever c_i < 1: an app of one 8-GPU job could win
every auction and never run (docs/themis.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

MAX_LEVELS = 32
# log(rho) added for a bidder at level 0 in the proportional-fair solve: the split first serves
# as many bidders as the GPUs allow, then maximizes prod 1/rho. Why: Themis' valuations are
# homogeneous (rho(m G) = rho(G) / m, Appendix, Theorem 3.2), so an app with no GPUs has an
# unbounded rho (§3.3.2: "causing its rho to become unbounded"). Ours is finite at 0 GPUs
# (the app is assumed to get its share after one lease, so that every app can bid), which
# made nothing look better than a little: two apps of equal rho bid rho(0) = 1.07, rho(4) = 2.0,
# rho(8) = 1.0, rho(16) = 0.5, and the split gave one of them all 16 GPUs (issue 22 item 6).
# The hidden payments still use the finite rho.
NOTHING = 50.0


@dataclass(frozen=True)
class Bid:
    """rho of an app for each level: ``gpus[l]`` GPUs (gpus[0] = 0), ``rho[l]`` > 0 its valuation's inverse."""

    app: str
    gpus: tuple[int, ...]
    rho: tuple[float, ...]


@dataclass(frozen=True)
class Outcome:
    """Per app: the proportional-fair level, its GPUs, c_i, and the GPUs it keeps (c_i x its pf GPUs in
    expectation, always one of its levels)."""

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
    total = float(sum(max(c, 0) for c in capacity.values()))
    cost: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    y_index: list[list[int]] = []
    for i, b in enumerate(bids):
        ys = list(range(len(cost), len(cost) + len(b.gpus)))
        for v, (g, r) in zip(ys, zip(b.gpus, b.rho)):
            # minimize sum log(rho) = maximize sum log(1/rho); a bidder left with nothing counts as
            # unbounded (NOTHING), whatever its finite rho says
            cost.append(math.log(r) + (NOTHING if g == 0 else 0.0))
            # exactly one level per app; then the level's GPUs count against the GPUs on auction
            rows.extend((i, len(bids)))
            cols.extend((v, v))
            vals.extend((1.0, float(g)))
        y_index.append(ys)
    n = len(cost)
    a = coo_matrix((vals, (rows, cols)), shape=(len(bids) + 1, n)).tocsr()
    lo = np.concatenate((np.ones(len(bids)), [-np.inf]))
    hi = np.concatenate((np.ones(len(bids)), [total]))
    res = milp(
        c=np.asarray(cost),
        constraints=LinearConstraint(a, lo, hi),
        integrality=np.ones(n),
        bounds=Bounds(np.zeros(n), np.ones(n)),
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


def pay(gpus: Sequence[int], level: int, c: float, draw: float) -> int:
    """GPUs an app keeps of its proportional-fair ``level`` after paying 1 - ``c`` (Pseudocode 1, lines 8-9).

    ``gpus`` are the app's bid levels (increasing, gpus[0] = 0). Kept is one of
    them: the highest at most c x gpus[level], or the next one up when ``draw``
    (uniform in [0, 1)) falls below the share that makes the expected GPUs kept
    exactly c x gpus[level] (Partial Allocation's fraction, for indivisible GPUs).
    """
    x = c * gpus[level]
    lo = max((i for i in range(level + 1) if gpus[i] <= x + 1e-9), default=0)
    if lo >= level:
        return gpus[level]
    hi = lo + 1
    p = (x - gpus[lo]) / (gpus[hi] - gpus[lo])
    return gpus[hi] if draw < p else gpus[lo]


def auction(bids: Sequence[Bid], capacity: Mapping[str, int], seed: str = "") -> Outcome:
    """Pseudocode 1's AUCTION: proportional-fair levels, then each app keeps c_i of its GPUs (``pay``,
    with draws seeded by ``seed``)."""
    levels, _ = _solve(bids, capacity)
    by_app = {b.app: b for b in bids}

    def others_value(lv: Mapping[str, int], without: str) -> float:
        return sum(-math.log(by_app[a].rho[l]) for a, l in lv.items() if a != without)

    pf_gpus = {b.app: b.gpus[levels[b.app]] for b in bids}
    rng = random.Random(seed)
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
        granted[b.app] = pay(b.gpus, levels[b.app], c, rng.random())
    return Outcome(levels, pf_gpus, fraction, granted)


def bid_levels(levels: Sequence[tuple[int, float]], limit: int) -> list[int]:
    """Which of an app's prefix levels to bid for: those within ``limit`` GPUs, at most MAX_LEVELS - 1
    of them (evenly spread over its jobs when there are more), each a distinct GPU count."""
    usable = [i for i, (g, _) in enumerate(levels) if g <= limit]
    if len(usable) > MAX_LEVELS - 1:
        step = len(usable) / (MAX_LEVELS - 1)
        usable = sorted({usable[min(int(round((k + 1) * step)) - 1, len(usable) - 1)] for k in range(MAX_LEVELS - 1)})
    out: list[int] = []
    seen: set[int] = set()
    for i in usable:
        if levels[i][0] not in seen:
            seen.add(levels[i][0])
            out.append(i)
    return out
