"""Theorem 1 (one job pair) and Algorithm 2 (sub-batch search); docs/sjf-bsbf.md §3-4.

A running job 1 (the host) has ``t1`` seconds of work left when alone; a new
job 2 (the guest) needs ``t2`` seconds alone at its full batch, ``t2 * r(b)``
at sub-batch b (gradient accumulation, SharingProfile.iteration_time).
Shared, their iteration times grow by xi1 and xi2 (eq. 5-6). Start the guest
at tau in [0, t1]: the sum of the two completion times is piecewise linear in
tau with slope +1 where the guest ends first and 2 - xi1 (2 - 1/xi2) where the
host ends first, so its minimum is at tau = 0 (share now) or tau = t1 (run
one after the other), never in between (Theorem 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from teiresias.policy.sjf_bsbf.model import SharingModel


@dataclass(frozen=True, slots=True)
class PairTimes:
    """Completion times (seconds from now) of host and guest."""

    host_end: float
    guest_end: float

    @property
    def average(self) -> float:
        return (self.host_end + self.guest_end) / 2.0


def overlapped(t1: float, t2b: float, xi1: float, xi2: float) -> PairTimes:
    """Both run from now; the survivor goes on alone (the guest keeps its sub-batch)."""
    if xi1 * t1 <= xi2 * t2b:
        end1 = xi1 * t1
        return PairTimes(end1, end1 + t2b - end1 / xi2)
    end2 = xi2 * t2b
    return PairTimes(t1 + end2 * (1.0 - 1.0 / xi1), end2)


# Seconds within which two sums of completion times are equal (they are computed in floats
# from times of at most ~1e7 s, so rounding stays far below it).
TIE = 1e-6


def approves(shared: PairTimes, seq: PairTimes) -> bool:
    """Theorem 1's choice: share when the pair's average completion time is lower shared; on a
    tie (equal up to rounding), share when it cannot hurt: the pair's GPUs are free no later
    than one after the other (the jobs behind them start no later). Issue 22 item 4: live,
    two fresh jobs get the same estimated length, and at xi = 1.5 Theorem 1 ties for every
    guest longer than its host (the slope 2 - xi1 (2 - 1/xi2) of §3 is 0): the guest waited."""
    d = shared.average - seq.average
    if d < -TIE:
        return True
    return d <= TIE and max(shared.host_end, shared.guest_end) <= seq.guest_end + TIE


def clearly_refuses(shared: PairTimes, seq: PairTimes) -> bool:
    """A refusal that holds for every longer guest of the same models (``SjfBsbfPolicy._share``):
    the shared average is above the other by more than rounding and the tie band's width."""
    return shared.average - seq.average > 20 * TIE


def sequential(t1: float, t2: float) -> PairTimes:
    """The guest waits for the host's GPUs and then runs alone at its full batch."""
    return PairTimes(t1, t1 + t2)


def inserted_at(tau: float, t1: float, t2b: float, xi1: float, xi2: float) -> PairTimes:
    """The guest starts after ``tau`` seconds (0 <= tau <= t1): Fig. 1 (c), for the proof's tests."""
    rest = overlapped(t1 - tau, t2b, xi1, xi2)
    return PairTimes(tau + rest.host_end, tau + rest.guest_end)


@dataclass(frozen=True, slots=True)
class PairDecision:
    """Algorithm 2's answer for one (host, guest) pair, with the numbers behind it."""

    share: bool
    sub_batch: int
    accumulation: int
    xi_host: float
    xi_guest: float
    guest_slowdown_alone: float  # r(b): the guest's iteration time at b relative to its full batch
    shared: PairTimes
    sequential: PairTimes
    # The queue check (queue.QueueForecast.check): summed completion times of the pair and the
    # jobs waiting, with the pair and without it; None where it did not run.
    queue: tuple[float, float] | None = None

    @property
    def best_average(self) -> float:
        return self.shared.average if self.share else self.sequential.average


def decide_pair(
    model: SharingModel,
    host_model: str,
    host_sub_batch: int | None,
    t1: float,
    guest_model: str,
    t2: float,
    *,
    first_fit: bool = False,
) -> PairDecision | None:
    """Best sub-batch and share-or-wait for a guest on a host's GPUs; None if no sub-batch fits memory.

    ``first_fit`` (SJF-FFS): share with the largest sub-batch that fits,
    whatever Theorem 1 says.
    """
    opts = model.options(host_model, host_sub_batch, guest_model)
    if not opts.sub_batches:
        return None
    xi1, xi2 = opts.xi_host, opts.xi_guest
    seq = sequential(t1, t2)
    best: tuple[int, float, int, PairTimes] | None = None
    for b, r, acc in opts.sub_batches:
        times = overlapped(t1, t2 * r, xi1, xi2)
        # first_fit: the largest sub-batch that fits. Else strictly better only: ties keep the
        # larger sub-batch (fewer accumulation steps).
        if best is None or (not first_fit and times.average < best[3].average):
            best = (b, r, acc, times)
        if first_fit:
            break
    assert best is not None
    b, r, acc, times = best
    return PairDecision(
        share=first_fit or approves(times, seq),
        sub_batch=b,
        accumulation=acc,
        xi_host=xi1,
        xi_guest=xi2,
        guest_slowdown_alone=r,
        shared=times,
        sequential=seq,
    )
