"""The queue's side of a sharing decision (docs/sjf-bsbf.md §5, "The queue check"; issue 22 item 5).

Theorem 1 compares a pair shared with the same pair one after the other on the
host's GPUs. That is the no-sharing alternative only for a queue of one: with
other jobs waiting, the guest might start sooner on GPUs another job frees, and
a host slowed by sharing, or a guest that outlives it on its GPUs, delays the
jobs that would take those GPUs next. SJF-BSBF's goal is the average JCT of all
jobs (the paper's problem (15)), so a pair Theorem 1 approves is started only
if the queue's summed completion times, forecast both ways, are not higher
shared than without sharing.

The forecast is list scheduling on a pool of GPUs: each waiting job, shortest
first (the policy's own order), takes the GPUs that free earliest, and holds
them for its length alone. It ignores node boundaries (a multi-node job is
placed as if any free GPUs would do), later arrivals and later sharing; it is
an estimate with the lengths the policy already uses, not a simulation. Only
the first ``HORIZON`` waiting jobs are forecast, and at most ``BUDGET`` pairs
are checked per round (bounds on cost: on bench_sharing's traces a horizon of
64 jobs and the whole queue gave the same decisions, and no round needed more
than 21 checks).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from teiresias.domain import Job, JobId
from teiresias.policy.sjf_bsbf.pair import PairTimes, overlapped

HORIZON = 128
# Pairs checked per round at most; past it, Theorem 1 alone decides (the paper's rule). On
# bench_sharing's replays (seeds 0-2, xi 1.5) a round checked 21 pairs at most, most 0-5; a
# round where every running job can host and 1,000 jobs wait would check hundreds.
BUDGET = 32

Release = list[tuple[float, int]]  # (seconds from now, GPUs) freed then


def completion_sum(free: int, busy: Sequence[Release], queue: Sequence[tuple[int, float]]) -> float:
    """Summed completion times (s from now) of ``queue`` ((GPUs, length) in order), each job taking
    the earliest-free GPUs of the pool: ``free`` GPUs now, and those ``busy`` frees."""
    heap: list[tuple[float, int]] = [(0.0, free)] if free > 0 else []
    for rel in busy:
        heap.extend(rel)
    heapq.heapify(heap)
    total = 0.0
    for gpus, length in queue:
        need, start = gpus, 0.0
        while need > 0:
            t, g = heapq.heappop(heap)
            start = t
            if g > need:
                heapq.heappush(heap, (t, g - need))
                need = 0
            else:
                need -= g
        end = start + length
        total += end
        heapq.heappush(heap, (end, gpus))
    return total


class QueueForecast:
    """The round's GPUs as the policy has planned them so far, and the waiting queue; gives the
    queue's summed completion times with and without a pair (``check``)."""

    def __init__(
        self,
        running: Sequence[Job],
        pending: Sequence[Job],
        length: Mapping[JobId, float],
        free: int,
        xi: Callable[[Job, Job], tuple[float, float]],
    ) -> None:
        self.free = free
        self.length = length
        self.busy: dict[JobId, Release] = {}
        by_id = {j.job_id: j for j in running}
        for j in running:
            partner = by_id.get(j.shared_with) if j.shared_with is not None else None
            if partner is None:
                self.busy[j.job_id] = [(length[j.job_id], j.num_gpus)]
            elif _is_host(j, partner):
                x_host, x_guest = xi(j, partner)
                self.busy[j.job_id] = pair_release(
                    j.num_gpus,
                    partner.num_gpus,
                    overlapped(length[j.job_id], length[partner.job_id], x_host, x_guest),
                )
        # A job larger than every GPU counted here never starts: it takes no part.
        pool = free + sum(g for rel in self.busy.values() for _, g in rel)
        self.queue = [j for j in pending if 0 < j.num_gpus <= pool]
        self.place = {j.job_id: k for k, j in enumerate(self.queue)}
        self.gone: set[JobId] = set()
        self._baseline: tuple[JobId, float] | None = None  # (guest, without): current until a start
        # Both sums per (host, pair times, run of the guest), current until a start. A run is a
        # stretch of consecutive waiting jobs alike in GPUs and length (live: the same size, so the
        # same expected length): taking out any one of them leaves the same queue, so they all
        # get the same answer.
        self._memo: dict[tuple[JobId, PairTimes, int], tuple[float, float]] = {}
        self.checks = 0
        self._run: dict[JobId, int] = {}
        for k, j in enumerate(self.queue):
            prev = self.queue[k - 1] if k else None
            alike = prev is not None and (prev.num_gpus, length[prev.job_id]) == (j.num_gpus, length[j.job_id])
            self._run[j.job_id] = self._run[prev.job_id] if alike and prev is not None else k

    def _others(self, guest: Job) -> list[Job]:
        """The first ``HORIZON`` waiting jobs other than ``guest``, in order (both alternatives
        count the same jobs)."""
        out: list[Job] = []
        for j in self.queue:
            if j.job_id not in self.gone and j.job_id != guest.job_id:
                out.append(j)
                if len(out) == HORIZON:
                    break
        return out

    def _lengths(self, jobs: Sequence[Job]) -> list[tuple[int, float]]:
        return [(j.num_gpus, self.length[j.job_id]) for j in jobs]

    def waiting(self, guest: Job) -> int:
        """Jobs the check counts besides the pair."""
        return len(self._others(guest))

    def started(self, job: Job) -> None:
        """``job`` starts now on idle GPUs."""
        self.gone.add(job.job_id)
        self.free -= job.num_gpus
        self.busy[job.job_id] = [(self.length[job.job_id], job.num_gpus)]
        self._baseline = None
        self._memo.clear()

    def shared(self, host: Job, guest: Job, times: PairTimes) -> None:
        """``guest`` starts now on ``host``'s GPUs."""
        self.gone.add(guest.job_id)
        self.busy[host.job_id] = pair_release(host.num_gpus, guest.num_gpus, times)
        self._baseline = None
        self._memo.clear()

    def check(self, host: Job, guest: Job, times: PairTimes) -> tuple[float, float] | None:
        """The summed completion times (s from now) of host, guest and the jobs waiting: without
        the pair (the guest waits in its place in the queue) and with it; None once the round
        has checked ``BUDGET`` pairs."""
        run = self._run.get(guest.job_id)
        key = (host.job_id, times, run) if run is not None else None
        got = self._memo.get(key) if key is not None else None
        if got is None:
            if self.checks >= BUDGET:
                return None
            self.checks += 1
            got = self._check(host, guest, times)
            if key is not None:
                self._memo[key] = got
        return got

    def _check(self, host: Job, guest: Job, times: PairTimes) -> tuple[float, float]:
        others = self._others(guest)
        if self._baseline is None or self._baseline[0] != guest.job_id:
            at = self.place.get(guest.job_id, len(self.queue))
            k = next((i for i, j in enumerate(others) if self.place[j.job_id] > at), len(others))
            queue = [*others[:k], guest, *others[k:]]
            self._baseline = (guest.job_id, completion_sum(self.free, list(self.busy.values()), self._lengths(queue)))
        without = self._baseline[1] + self.length[host.job_id]
        busy = [rel for jid, rel in self.busy.items() if jid != host.job_id]
        busy.append(pair_release(host.num_gpus, guest.num_gpus, times))
        with_pair = completion_sum(self.free, busy, self._lengths(others)) + times.host_end + times.guest_end
        return without, with_pair


def pair_release(host_gpus: int, guest_gpus: int, times: PairTimes) -> Release:
    """When a pair's GPUs free: the guest's share of the host's GPUs once both ended (the survivor
    runs on), the rest when the host ends."""
    last = max(times.host_end, times.guest_end)
    guest_gpus = min(guest_gpus, host_gpus)
    rel = [(last, guest_gpus)]
    if host_gpus > guest_gpus:
        rel.append((times.host_end, host_gpus - guest_gpus))
    return rel


def _is_host(job: Job, partner: Job) -> bool:
    """Which side of a running pair hosts: the one on more GPUs, else the one that started first
    (a guest takes a subset of its host's GPUs, after it)."""
    if job.num_gpus != partner.num_gpus:
        return job.num_gpus > partner.num_gpus
    a = (job.first_start_time or 0.0, job.job_id)
    b = (partner.first_start_time or 0.0, partner.job_id)
    return a < b
