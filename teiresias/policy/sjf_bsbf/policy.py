"""SJF-BSBF and its baseline SJF-FFS (docs/sjf-bsbf.md §5).

Non-preemptive: running jobs are always kept. Waiting jobs in shortest-job
order each try, in turn:

1. exclusive idle GPUs (the placement policy, as every other policy);
2. else the GPUs of one running job that shares with nobody yet (at most
   two jobs per GPU, eq. 9 with K = 2):
   - ``sjf-bsbf``: every such host is scored by Algorithm 2 (best sub-batch,
     Theorem 1's share-or-wait); among the hosts where sharing lowers the
     pair's average JCT, the one with the lowest shared average wins;
   - ``sjf-ffs``: the first host (node order) on which some sub-batch fits
     memory, shared at once with the largest such sub-batch.

A guest shares exactly one host and takes a subset of its GPUs (the
placement policy picks them among the host's), so each pair is the two-job
system of Theorem 1. The paper's Algorithm 1 may gather GPUs from several
hosts; we do not (docs/sjf-bsbf.md says why).

Job length: ``Job.remaining_time`` where the owner knows it (the simulator;
the paper assumes known durations). Without it, the expected remaining
GPU-time under the Gittins/LAS service distribution given the attained
service, divided by the job's GPUs; without either, a ConfigError.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from teiresias.domain import Job, JobId, Placement, Plan, Snapshot
from teiresias.domain.plan import Sharing
from teiresias.errors import ConfigError
from teiresias.policy.base import PlacementPolicy
from teiresias.policy.sjf_bsbf.model import SharingModel
from teiresias.policy.sjf_bsbf.pair import TIE, PairDecision, clearly_refuses, decide_pair
from teiresias.policy.sjf_bsbf.queue import QueueForecast

# A job's own history counts once it has this many finished runs (fewer say little of its length).
MIN_HISTORY = 3


class SjfBsbfPolicy:
    """Shortest job first with best sharing benefit first (the paper's Algorithm 1)."""

    name = "sjf-bsbf"
    preemptive = False
    first_fit = False

    def __init__(
        self,
        placement: PlacementPolicy,
        model: SharingModel | None = None,
        distribution: Any = None,
        *,
        exhaustive: bool = False,
        history: Mapping[tuple[str, str], Any] | None = None,
    ) -> None:
        self.placement = placement
        self.model = model if model is not None else SharingModel()
        self.distribution = distribution
        # (user, job name) -> the GPU-time distribution of that user's finished jobs of that name
        # (the live controller's records; docs/sjf-bsbf.md §9): a job's own history, before the
        # site's distribution, for its length without a duration.
        self.history = dict(history or {})
        # Score every (host, guest) pair of the round: the plain form the fast one is tested
        # against (tests/unit/test_sjf_bsbf_speed.py); same decisions, slower.
        self.exhaustive = exhaustive

    # -- job length ---------------------------------------------------------
    def remaining(self, job: Job) -> float:
        """Seconds of work left when running alone at the job's current batch.

        The duration where the owner knows it (the simulator, as in the paper). Live, the
        expected residual GPU-time given the GPU-time the job had, divided by its GPUs: under
        the job's own history (its user's finished jobs of the same name, ``MIN_HISTORY`` of
        them at least) while it has not outlived all of them, else under the site's
        distribution. Issue 22 item 4: with the site's alone, two fresh jobs of one size get
        the same length, so Theorem 1 could not tell which should host."""
        r = job.remaining_time
        if r is None:
            d = self.distribution
            if d is None:
                raise ConfigError(
                    f"policy {self.name!r} needs each job's duration or a GPU-time distribution, but job"
                    f" {job.job_id} has no duration; give --samples/-g FILE (the Gittins/LAS estimate)"
                )
            a = job.attained_gpu_seconds
            own = self.history.get((job.user, job.model_name))
            left = own.mean_residual(a) if own is not None and len(own) >= MIN_HISTORY else 0.0
            r = (left or d.mean_residual(a)) / max(job.num_gpus, 1)
        if job.sub_batch:
            r *= self.model.profile(job.model_name).iteration_time(job.sub_batch)
        return float(r)

    def key(self, job: Job) -> tuple[Any, ...]:
        return (self.remaining(job), job.submit_time, job.job_id)

    # -- the round ----------------------------------------------------------
    def decide(self, snapshot: Snapshot) -> Plan:
        jobs = list(snapshot.jobs)
        length = {j.job_id: self.remaining(j) for j in jobs}  # once per job and round
        running = [(j, j.placement) for j in jobs if j.is_running and j.placement is not None]
        pending = sorted(
            (j for j in jobs if not j.is_running), key=lambda j: (length[j.job_id], j.submit_time, j.job_id)
        )
        free = {n: max(g, 0) for n, g in snapshot.free_gpus().items()}
        node_order = {n.name: i for i, n in enumerate(snapshot.cluster.nodes)}
        # Hosts: running jobs alone on their GPUs that the owner can share (Job.shareable: live, a
        # job holding whole GPUs gives no shard of them), on nodes with nothing unavailable (a
        # draining node takes no new job, not even a guest), first-fit order = their first node, then id.
        placed_hosts = [
            (h, p)
            for h, p in running
            if h.shared_with is None
            and h.shareable
            and not any(snapshot.unavailable.get(a.node, 0) for a in p.allocations)
        ]
        placed_hosts.sort(key=lambda hp: (min(node_order.get(n, 0) for n in hp[1].nodes), hp[0].job_id))
        hosts = [h for h, _ in placed_hosts]
        start: dict[JobId, Placement] = {}
        sharing: dict[JobId, Sharing] = {}
        reasons: dict[JobId, str] = {}
        # Free GPUs only shrink during a round and placement is monotone: a job shape that
        # found no idle GPUs once finds none later (the walk's memo, teiresias.policy.allocate).
        job_key = None if self.exhaustive else getattr(self.placement, "job_key", None)
        no_room: set[Any] = set()
        board = _Hosts(hosts, self.placement, snapshot)
        forecast = QueueForecast(
            [j for j, _ in running],
            pending,
            length,
            sum(free.values()),
            lambda h, g: self.model.interference(h.model_name, g.model_name),
        )
        for job in pending:
            if job.num_gpus <= 0:
                reasons[job.job_id] = "asks for no GPU"
                continue
            shape = job_key(job) if job_key is not None else None
            pl = None if shape is not None and shape in no_room else self.placement.place(job, free, snapshot.cluster)
            if pl is not None:
                start[job.job_id] = pl
                for a in pl.allocations:
                    free[a.node] -= a.gpus
                forecast.started(job)
                continue
            if shape is not None:
                no_room.add(shape)
            if not job.shareable:
                reasons[job.job_id] = f"waits for {job.num_gpus} free GPU(s): it asks for whole GPUs, so it shares none"
                continue
            got = self._share(job, board, length, forecast)
            if isinstance(got, str):
                reasons[job.job_id] = got
                continue
            host, pl, dec = got
            start[job.job_id] = pl
            sharing[job.job_id] = Sharing(
                partner=host.job_id,
                sub_batch=dec.sub_batch,
                accumulation=dec.accumulation,
                slowdown=dec.xi_guest,
                partner_slowdown=dec.xi_host,
                alone_slowdown=dec.guest_slowdown_alone,
                shared_avg_jct=dec.shared.average,
                sequential_avg_jct=dec.sequential.average,
                queue_sum_jct=dec.queue[0] if dec.queue else None,
                queue_sum_jct_without=dec.queue[1] if dec.queue else None,
            )
            board.take(host)
            forecast.shared(host, job, dec.shared)
        order = tuple(
            j.job_id for j in sorted((j for j, _ in running), key=lambda j: (length[j.job_id], j.submit_time, j.job_id))
        ) + tuple(j.job_id for j in pending)
        return Plan(
            start=start,
            keep=tuple(j.job_id for j in jobs if j.is_running),
            queues={j.job_id: 0 for j in jobs},
            order=order,
            reasons=reasons,
            sharing=sharing,
        )

    # -- one guest ----------------------------------------------------------
    def _pair(self, host: Job, job: Job, length: Mapping[JobId, float]) -> PairDecision | None:
        return decide_pair(
            self.model,
            host.model_name,
            host.sub_batch,
            length[host.job_id],
            job.model_name,
            length[job.job_id],
            first_fit=self.first_fit,
        )

    def _scored(self, board: _Hosts, host: Job, job: Job, length: Mapping[JobId, float]) -> PairDecision | None:
        """``_pair``, once per host, guest model and guest length in a round (live, waiting jobs
        of one model and size have the same expected length)."""
        key = (host.job_id, job.model_name, length[job.job_id])
        if key not in board.scores:
            board.scores[key] = self._pair(host, job, length)
        return board.scores[key]

    @staticmethod
    def _refusal(host: Job, dec: PairDecision | None) -> str:
        """Why a guest does not share ``host``'s GPUs, with Theorem 1's two numbers (issue 22 item 4:
        two different numbers, or what else decided)."""
        if dec is None:
            return f"waits: no sub-batch of it fits GPU memory beside job {host.job_id}"
        shared, seq = dec.shared, dec.sequential
        if shared.average - seq.average > TIE:
            a, b = _two(shared.average, seq.average)
            return (
                f"waits for job {host.job_id}: sharing its GPUs would raise the pair's average JCT"
                f" to {a} s from {b} s one after the other"
            )
        a, b = _two(max(shared.host_end, shared.guest_end), seq.guest_end)
        return (
            f"waits for job {host.job_id}: sharing its GPUs would not lower the pair's average JCT"
            f" ({shared.average:.0f} s either way) and would keep them busy until {a} s from now instead of {b} s"
        )

    def _share(
        self, job: Job, board: _Hosts, length: Mapping[JobId, float], forecast: QueueForecast
    ) -> tuple[Job, Placement, PairDecision] | str:
        """The host, GPUs and settings for ``job`` as a guest, or why it waits.

        Every host whose GPUs can hold the job is a candidate; ``sjf-ffs`` takes the first
        where a sub-batch fits; ``sjf-bsbf`` takes, among those Theorem 1 approves (with
        ties toward sharing, ``pair.approves``), the one with the lowest shared average that
        the queue check passes (``_settle``). Without a match the reason is the last
        candidate's, or the queue check's.

        Fast form (the plain one is ``_share_all``; same answers): waiting jobs come
        shortest first, and a host that refuses a guest refuses every longer guest of the
        same model, because the pair's shared completion times grow with the guest's length
        faster than one after the other does (docs/sjf-bsbf.md, "Decision time"); a host
        where no sub-batch of a model fits never takes it. So each host is scored against
        a model's guests only until it refuses one, and a deep queue costs one look-up per
        waiting job and the score of its last candidate for the reason.
        """
        if self.exhaustive or not board.keyed:
            return self._share_all(job, board, length, forecast)
        fits = board.fitting(job)
        if not fits:
            return f"waits for {job.num_gpus} free GPU(s): no running job alone on enough GPUs to share"
        t2 = length[job.job_id]
        approved: list[tuple[Job, Placement, PairDecision]] = []
        for host, pl in board.open(job, t2):
            dec = self._scored(board, host, job, length)
            if dec is None:
                board.refuse(host, job, 0.0)
                continue
            if self.first_fit:
                return host, pl, dec
            if not dec.share:
                # Only a clear refusal holds for every longer guest (a tie may round either way).
                if clearly_refuses(dec.shared, dec.sequential):
                    board.refuse(host, job, t2)
                continue
            approved.append((host, pl, dec))
        if approved:
            return self._settle(job, approved, forecast)
        last = fits[-1][0]
        return self._refusal(last, self._scored(board, last, job, length))

    def _share_all(
        self, job: Job, board: _Hosts, length: Mapping[JobId, float], forecast: QueueForecast
    ) -> tuple[Job, Placement, PairDecision] | str:
        """``_share`` scoring every host against the job (Algorithm 1, lines 10-17, as written)."""
        approved: list[tuple[Job, Placement, PairDecision]] = []
        why = f"waits for {job.num_gpus} free GPU(s): no running job alone on enough GPUs to share"
        for host in board.hosts:
            if host.job_id in board.taken:
                continue
            assert host.placement is not None
            pl = self.placement.place(job, {a.node: a.gpus for a in host.placement.allocations}, board.cluster)
            if pl is None:
                continue
            dec = self._pair(host, job, length)
            if dec is None or not (self.first_fit or dec.share):
                why = self._refusal(host, dec)
                continue
            if self.first_fit:
                return host, pl, dec
            approved.append((host, pl, dec))
        return self._settle(job, approved, forecast) if approved else why

    def _settle(
        self, job: Job, approved: list[tuple[Job, Placement, PairDecision]], forecast: QueueForecast
    ) -> tuple[Job, Placement, PairDecision] | str:
        """The host for ``job`` among those Theorem 1 approves: the lowest shared average first
        (Algorithm 1, line 14), the first whose pair the queue check passes: the queue's summed
        completion times with the pair no higher than without it (``queue.QueueForecast``;
        docs/sjf-bsbf.md §5 "The queue check")."""
        approved = sorted(approved, key=lambda c: c[2].shared.average)  # stable: ties keep host order
        first: tuple[Job, float, float] | None = None
        for host, pl, dec in approved:
            sums = forecast.check(host, job, dec.shared)
            if sums is None:  # the round's checks are spent: Theorem 1 alone (the paper's rule)
                return host, pl, dec
            without, with_pair = sums
            if with_pair <= without + TIE:
                return host, pl, replace(dec, queue=(with_pair, without))
            if first is None:
                first = (host, without, with_pair)
        assert first is not None
        host, without, with_pair = first
        a, b = _two(with_pair, without)
        return (
            f"waits: sharing job {host.job_id}'s GPUs would raise the summed completion times of the pair and"
            f" the {forecast.waiting(job)} job(s) waiting to {a} s from {b} s without sharing"
        )


def _two(a: float, b: float) -> tuple[str, str]:
    """Two different numbers as two different strings (as few decimals as tell them apart)."""
    for digits in range(4):
        x, y = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if x != y:
            return x, y
    return f"{a:.6f}", f"{b:.6f}"


class _Hosts:
    """The round's hosts (running jobs alone on their GPUs, in first-fit order) and what the
    round learned of them: where a guest of a given shape goes on each (the placement policy
    among the host's GPUs; a host's GPUs do not change in a round), which hosts were taken,
    and, per guest model, the shortest guest each host refused (``_share``)."""

    def __init__(self, hosts: list[Job], placement: PlacementPolicy, snapshot: Snapshot) -> None:
        self.hosts = hosts
        self.placement = placement
        self.cluster = snapshot.cluster
        self.job_key = getattr(placement, "job_key", None)
        self.keyed = self.job_key is not None
        self.taken: set[JobId] = set()
        self._place: dict[tuple[JobId, Any], Placement | None] = {}
        self._fitting: dict[Any, list[tuple[Job, Placement]]] = {}
        self._open: dict[tuple[Any, str], list[tuple[Job, Placement]]] = {}
        self._refused: dict[tuple[JobId, str], float] = {}
        self.scores: dict[tuple[JobId, str, float], PairDecision | None] = {}
        self._version = 0  # hosts taken so far: the lists below are current for this many
        self._seen: dict[Any, int] = {}

    def place(self, job: Job, host: Job) -> Placement | None:
        assert host.placement is not None
        key = (host.job_id, self.job_key(job)) if self.job_key is not None else None
        if key is not None and key in self._place:
            return self._place[key]
        on: Mapping[str, int] = {a.node: a.gpus for a in host.placement.allocations}
        pl = self.placement.place(job, on, self.cluster)
        if key is not None:
            self._place[key] = pl
        return pl

    def take(self, host: Job) -> None:
        self.taken.add(host.job_id)
        self._version += 1

    def fitting(self, job: Job) -> list[tuple[Job, Placement]]:
        """Hosts not taken whose GPUs can hold ``job``, with its placement there, in order."""
        assert self.job_key is not None
        shape = self.job_key(job)
        got = self._fitting.get(shape)
        if got is None:
            got = [(h, pl) for h in self.hosts if (pl := self.place(job, h)) is not None]
        elif self._seen.get(shape) == self._version:
            return got
        got = [hp for hp in got if hp[0].job_id not in self.taken]
        self._fitting[shape] = got
        self._seen[shape] = self._version
        return got

    def open(self, job: Job, length: float) -> list[tuple[Job, Placement]]:
        """``fitting`` less the hosts that refused a guest of the job's model no longer than ``length``."""
        assert self.job_key is not None
        key = (self.job_key(job), job.model_name)
        got = self._open.get(key)
        got = self.fitting(job) if got is None else [hp for hp in got if hp[0].job_id not in self.taken]
        model = job.model_name
        got = [hp for hp in got if self._refused.get((hp[0].job_id, model), math.inf) > length]
        self._open[key] = got
        return got

    def refuse(self, host: Job, job: Job, length: float) -> None:
        """``host`` refuses guests of the job's model as long as ``length`` or longer (0: every one)."""
        key = (host.job_id, job.model_name)
        self._refused[key] = min(self._refused.get(key, math.inf), length)


class SjfFfsPolicy(SjfBsbfPolicy):
    """SJF with first-fit sharing: the paper's baseline (§VI-A4), sharing whenever memory allows."""

    name = "sjf-ffs"
    first_fit = True
