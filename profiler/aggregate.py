"""Records of all ranks of a job -> one ``Profile`` (Tiresias §3.3.1).

Method (measured facts in docs/profiler.md):
1. Collectives. Socket layer: every gloo message header names its collective
   by slot (collective-type prefix << 56 | tag << 24); the tag counts
   collectives in issue order, identically on every rank. A collective's size
   is the payload bytes all ranks sent under its slot. NCCL layer: each call is
   one collective; its size is count x type size, in per-process call order.
   Per-message sizes are useless here (gloo cuts buffers into ~1 MiB pieces).
2. Iteration period, repeat-lag method: the smallest lag k at which the
   sequence of collective sizes repeats over (nearly) the longest stretch any
   lag achieves, so runs of equal-size tensors do not pass for an iteration;
   period = time from the first to the last iteration of that steady stretch
   divided by the iterations between them.
3. Iteration check: an iteration reduces every gradient byte once, so the
   pattern's bytes must match the model's (model hook, else DDP's start-up
   broadcast). A stack of identical blocks repeats k times per iteration: k
   patterns (counted by the hook's iteration marks, else by bytes) make one;
   a pattern that is no whole part of the model is no iteration (no skew).
4. Skew = largest collective / all collective bytes of an iteration, median
   over the steady iterations: the skew of what the network carries. With
   DDP a collective is a gradient bucket at the job's bucket cap; with one
   collective per tensor it is Tiresias Table 6's "largest tensor ratio".
   Placement uses this bucket-level figure for every job (docs/profiler.md,
   "Which skew"); the model hook's tensor sizes give the largest-tensor ratio
   (shown beside it) and, laid out in DDP's buckets, the same bucket-level
   figure, which checks the traffic and stands in when traffic cannot tell.

Never a wrong skew: missing ranks, truncated files, a job killed inside its
window, a single-rank job, too few iterations or a pattern that cannot be an
iteration give ``valid=False`` and a reason.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from profiler.records import (
    NCCL_KINDS,
    FileState,
    Kind,
    RecordFile,
    RecordFileError,
    read_record_file,
    record_files,
)

DEFAULT_BUCKET_CAP = 25 * 1024 * 1024  # torch DDP default bucket_cap_mb=25
DDP_FIRST_BUCKET = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
ITER_BYTES_TOL = 0.10  # an iteration's gradient bytes vs the model's
MODEL_FILE_PREFIX = "model-rank"
REPEAT_SLACK = 0.05  # chosen lag may cover this much less of the run than the best lag
AGREE_TOL = 0.05  # traffic vs model skew agreement


@dataclass(frozen=True)
class Profile:
    """What the profiler learnt about one job (JSON-serialisable).

    ``skew`` is the figure placement uses (None when unknown): the skew of
    the job's collectives (DDP buckets at its cap), from ``skew_source``
    ("traffic", or "model": the hook's tensors in DDP's buckets).
    ``model_skew`` is the largest-tensor ratio, shown beside it. ``bytes_per_iteration`` is what one
    rank sends per iteration (mean over ranks); ``intensity_bps`` is that
    divided by ``period_s``; ``model_bytes`` estimates the gradient bytes
    reduced per iteration (ring all-reduce sends 2(n-1)/n of it per rank).
    """

    valid: bool
    reason: str = ""
    layer: str = "none"  # "gloo", "nccl" or "none"
    ranks: int = 0
    iterations: int = 0
    collectives_per_iteration: int = 0
    bytes_per_iteration: float = 0.0
    model_bytes: float = 0.0
    period_s: float | None = None
    intensity_bps: float | None = None
    skew: float | None = None
    skew_source: str | None = None
    traffic_skew: float | None = None
    traffic_skew_valid: bool = False
    bucketed: bool = False
    skew_lower_bound: float | None = None
    largest_collective_bytes: float = 0.0
    model_skew: float | None = None  # largest-tensor ratio (Tiresias Table 6), from the model hook
    model_tensors: int = 0
    model_bucket_skew: float | None = None  # the same tensors in DDP's buckets at the job's cap
    model_buckets: int = 0
    agrees: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["notes"] = tuple(kw.get("notes", ()))
        return cls(**kw)

    @classmethod
    def none(cls, reason: str, **kw: object) -> Profile:
        """The "no profile" result: placement must treat the skew as unknown."""
        return cls(valid=False, reason=reason, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Collectives:
    """One job's collectives in issue order (reference rank's clock)."""

    sizes: np.ndarray  # float64 bytes (summed over ranks for gloo)
    times: np.ndarray  # float64 seconds
    per_rank_sent: float  # bytes one rank sends for all of them (mean over ranks)
    layer: str
    # sizes / gradient_factor = gradient bytes reduced: a gloo ring all-reduce
    # of M bytes over n ranks sends 2(n-1) x M in all; an NCCL call counts M.
    gradient_factor: float = 1.0
    # The model's size as DDP's start-up traffic states it (its broadcast of
    # the model from rank 0, confirmed by its first all-reduce); None if not seen.
    startup_broadcast: float | None = None
    marks: np.ndarray = field(default_factory=lambda: np.zeros(0))  # iteration marks, same clock


@dataclass(frozen=True)
class Iterations:
    lag: int  # collectives per iteration
    start: int  # first collective of the steady run
    count: int  # complete iterations in the steady run
    period_s: float
    covered: int = 0  # collectives in the steady run (lag-periodic from start)


# ---- collectives from records --------------------------------------------------


def gloo_collectives(files: list[RecordFile]) -> Collectives | None:
    """Group gloo sends by slot over all ranks; order by tag (issue order)."""
    sends = [f.of_kind(Kind.SOCK_SEND) for f in files]
    if not any(len(s) for s in sends):
        return None
    slots = np.concatenate([s["slot"] for s in sends])
    nbytes = np.concatenate([s["bytes"] for s in sends]).astype(np.float64)
    uniq, inv = np.unique(slots, return_inverse=True)
    sizes = np.bincount(inv, weights=nbytes, minlength=len(uniq))
    # Times: first record of each slot on the reference (lowest) rank, headers
    # of either direction included so receive-only slots still get a time.
    ref = min(files, key=lambda f: f.rank)
    rr = ref.records[np.isin(ref.records["kind"], [Kind.SOCK_SEND, Kind.SOCK_RECV])]
    times = np.full(len(uniq), np.nan)
    if len(rr):
        idx = np.searchsorted(uniq, rr["slot"])
        ok = (idx < len(uniq)) & (uniq[np.minimum(idx, len(uniq) - 1)] == rr["slot"])
        t = rr["t_ns"][ok].astype(np.float64) / 1e9
        np.fmin.at(times, idx[ok], t)
    tag = (uniq >> np.uint64(24)) & np.uint64(0xFFFFFFFF)
    order = np.lexsort((uniq, tag))
    keep = (sizes[order] > 0) & ~np.isnan(times[order])
    order = order[keep]
    n = len(files)
    prefix = (uniq[order] >> np.uint64(56)).astype(np.int64)
    return Collectives(
        sizes=sizes[order],
        times=times[order],
        per_rank_sent=float(nbytes.sum()) / n,
        layer="gloo",
        gradient_factor=2.0 * (n - 1) if n > 1 else 1.0,
        # A broadcast delivers one copy to each of the n-1 other ranks.
        startup_broadcast=_startup_broadcast(
            sizes[order],
            prefix == GLOO_BROADCAST,
            prefix == GLOO_ALLREDUCE,
            max(n - 1, 1),
            2.0 * (n - 1) if n > 1 else 1.0,
        ),
        marks=_marks(ref),
    )


# gloo/common/utils.h: kAllreduceSlotPrefix, kBroadcastSlotPrefix (slot >> 56).
GLOO_ALLREDUCE = 0x04
GLOO_BROADCAST = 0x06


def _startup_broadcast(
    sizes: np.ndarray, is_bcast: np.ndarray, is_allreduce: np.ndarray, copies: int, gradient_factor: float
) -> float | None:
    """The model's size from DDP's start-up traffic, or None.

    DDP copies the whole model (parameters and buffers) from rank 0 at
    construction, and its first iteration all-reduces every gradient in one
    bucket (buckets are formed after it). Bytes broadcast before the first
    all-reduce, per copy, count only when that all-reduce confirms them
    (within ITER_BYTES_TOL): a job's own broadcasts would inflate them, and
    a model k times too big would regroup k real iterations into one.
    """
    if not is_allreduce.any():
        return None
    first = int(np.argmax(is_allreduce))
    b = float(sizes[:first][is_bcast[:first]].sum()) / copies
    g = float(sizes[first]) / gradient_factor
    if b <= 0 or abs(g / b - 1) > ITER_BYTES_TOL:
        return None
    return b


def _marks(ref: RecordFile) -> np.ndarray:
    """Iteration marks (one per DDP forward, from the model hook) of a rank."""
    return np.sort(ref.of_kind(Kind.ITER_MARK)["t_ns"].astype(np.float64) / 1e9)


_NCCL_SEND_FACTOR = {
    Kind.NCCL_ALLREDUCE: lambda n: 2.0 * (n - 1) / n,
    Kind.NCCL_REDUCESCATTER: lambda n: (n - 1) / n,
    Kind.NCCL_ALLGATHER: lambda n: (n - 1) / n,
}


def nccl_collectives(files: list[RecordFile]) -> Collectives | None:
    """NCCL calls of the reference rank in call order; bytes sent estimated per kind."""
    ref = min(files, key=lambda f: f.rank)
    r = ref.of_kind(*NCCL_KINDS)
    if not len(r):
        return None
    r = r[np.argsort(r["opcode"], kind="stable")]
    sizes = r["bytes"].astype(np.float64)
    sent = 0.0
    for rec in r:
        n = max(int(rec["nranks"]), 1)
        f = _NCCL_SEND_FACTOR.get(Kind(int(rec["kind"])), lambda n: 1.0)
        sent += float(rec["bytes"]) * (f(n) if n > 1 else 0.0)
    kinds = r["kind"]
    return Collectives(
        sizes=sizes,
        times=r["t_ns"].astype(np.float64) / 1e9,
        per_rank_sent=sent,
        layer="nccl",
        startup_broadcast=_startup_broadcast(sizes, kinds == Kind.NCCL_BROADCAST, kinds == Kind.NCCL_ALLREDUCE, 1, 1.0),
        marks=_marks(ref),
    )


# ---- iterations -------------------------------------------------------------------


def _longest_run(match: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True in ``match``."""
    best_a, best_len, a = 0, 0, -1
    for i, m in enumerate(np.append(match, False)):
        if m and a < 0:
            a = i
        elif not m and a >= 0:
            if i - a > best_len:
                best_a, best_len = a, i - a
            a = -1
    return best_a, best_len


def find_iterations(sizes: np.ndarray, times: np.ndarray, min_repeats: int = 3) -> Iterations | None:
    """Repeat-lag period detection; None if no lag repeats ``min_repeats`` times.

    For each lag k the longest run where sizes[i] == sizes[i + k] marks a
    stretch that is exactly k-periodic; it covers (run + k) collectives. The
    chosen lag is the smallest whose coverage is within REPEAT_SLACK of the
    best one: multiples of the true lag cover no more, and a lag that only
    fits a run of equal-size tensors covers far less. A start-up prefix (the
    model broadcast, DDP's first iteration before its buckets are rebuilt) and
    a ragged end simply fall outside the run.
    """
    n = len(sizes)
    if n < max(min_repeats, 2):
        return None
    runs: dict[int, tuple[int, int]] = {}
    for k in range(1, n // min_repeats + 1):
        a, length = _longest_run(sizes[k:] == sizes[:-k])
        if length >= (min_repeats - 1) * k:
            runs[k] = (a, length)
    if not runs:
        return None
    cover = {k: (length + k) / n for k, (_, length) in runs.items()}
    best = max(cover.values())
    k = min(k for k, c in cover.items() if c >= best - REPEAT_SLACK)
    a, length = runs[k]
    count = (length + k) // k
    # Mean period over the steady stretch (span / iterations): the job's real
    # rate of progress. A median of per-lag gaps estimates the same thing but
    # wanders by +-10 % on a shared, busy CPU; the span does not.
    period = float(times[a + (count - 1) * k] - times[a]) / (count - 1)
    return Iterations(lag=k, start=a, count=count, period_s=period, covered=length + k)


def regroup(it: Iterations, k: int, times: np.ndarray) -> Iterations:
    """The same steady run read as iterations of k x ``it.lag`` collectives.

    A lag-periodic run is also (k x lag)-periodic, and any window of k x lag
    consecutive collectives holds each of its collectives once, so skew and
    bytes do not depend on where the window starts.
    """
    lag = it.lag * k
    count = it.covered // lag
    period = float(times[it.start + (count - 1) * lag] - times[it.start]) / (count - 1) if count > 1 else 0.0
    return Iterations(lag=lag, start=it.start, count=count, period_s=period, covered=it.covered)


def lag_from_marks(times: np.ndarray, marks: np.ndarray, it: Iterations) -> int | None:
    """Collectives per iteration as the model hook's iteration marks count them.

    DDP finishes every bucket's all-reduce before backward returns, so all
    collectives of an iteration start between its forward's mark and the
    next one. The median count over the mark intervals inside the steady run;
    None without marks (no hook) or when no interval has collectives (e.g.
    gradient accumulation marks forwards that do not all-reduce).
    """
    if len(marks) < 3:
        return None
    lo, hi = times[it.start], times[it.start + it.covered - 1]
    inside = marks[(marks >= lo) & (marks <= hi)]
    if len(inside) < 2:
        return None
    counts = np.histogram(times, bins=inside)[0]
    lag = int(np.median(counts))
    return lag if lag > 0 else None


def windows_skew(sizes: np.ndarray, it: Iterations) -> tuple[float, float, float]:
    """Median over steady iterations of (largest / total, total, largest)."""
    skews, totals, larg = [], [], []
    for j in range(it.count):
        w = sizes[it.start + j * it.lag : it.start + (j + 1) * it.lag]
        if len(w) < it.lag:
            break
        skews.append(float(w.max() / w.sum()))
        totals.append(float(w.sum()))
        larg.append(float(w.max()))
    return float(np.median(skews)), float(np.median(totals)), float(np.median(larg))


# ---- model hook ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFile:
    """What the model hook wrote: trainable parameter bytes in registration
    order, and the DDP ``bucket_cap_mb`` the job passed (None: DDP's default)."""

    sizes: tuple[int, ...]
    bucket_cap_mb: float | None = None
    sparse: tuple[str, ...] = ()  # parameters with sparse gradients (embeddings with sparse=True)

    @property
    def gradient_bytes(self) -> int:
        return sum(self.sizes)


def read_model_file(profile_dir: Path) -> ModelFile | None:
    """The file written by profiler.model_hook (lowest rank), or None."""
    cands = sorted(profile_dir.glob(MODEL_FILE_PREFIX + "*.json"))
    for p in cands:
        try:
            data = json.loads(p.read_text())
            sizes = tuple(int(b) for _, b in data["tensors"])
            cap = data.get("bucket_cap_mb")
            cap = None if cap is None else float(cap)
            sparse = tuple(str(n) for n in data.get("sparse", []))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if sizes and sum(sizes) > 0:
            return ModelFile(sizes=sizes, bucket_cap_mb=cap, sparse=sparse)
    return None


def ddp_buckets(sizes: tuple[int, ...] | list[int], bucket_cap_mb: float | None) -> list[int]:
    """Bucket sizes DDP forms for these parameters (torch 2.x Reducer rule).

    Gradients are assumed ready in reverse registration order (DDP's own
    assumption for its first layout; its rebuilt layout follows the observed
    order, the same for a model run front to back). A bucket closes once it
    reaches its limit: 1 MiB for the first and ``bucket_cap_mb`` (25) after it
    when the job left bucket_cap_mb at its default; ``bucket_cap_mb`` for all
    when it set one.
    """
    cap = int((DEFAULT_BUCKET_CAP / 2**20 if bucket_cap_mb is None else bucket_cap_mb) * 2**20)
    cap = max(cap, 1)
    first = min(DDP_FIRST_BUCKET, cap) if bucket_cap_mb is None else cap
    buckets: list[int] = []
    cur = 0
    for b in reversed(list(sizes)):
        cur += b
        if cur >= (first if not buckets else cap):
            buckets.append(cur)
            cur = 0
    if cur:
        buckets.append(cur)
    return buckets


# ---- the whole job -------------------------------------------------------------------


def aggregate_dir(
    profile_dir: str | os.PathLike[str],
    *,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP,
    min_iterations: int = 3,
) -> Profile:
    """Aggregate every rank's record file in ``profile_dir`` into one Profile."""
    d = Path(profile_dir)
    model = read_model_file(d) if d.is_dir() else None
    if model is not None and model.sparse:
        # DDP reduces sparse gradients one by one, outside its buckets, in collectives
        # sized by each batch's rows: no repeating pattern, no fixed bytes per
        # iteration (it said "too few iterations" and 0.00 MiB per iteration).
        return Profile.none(
            f"the model has sparse gradients ({', '.join(model.sparse[:3])}"
            f"{', ...' if len(model.sparse) > 3 else ''}): DDP reduces them outside its buckets in "
            "collectives sized by each batch's rows, so the job has no fixed traffic per iteration to "
            "profile; it is placed without a profile",
            model_tensors=len(model.sizes),
        )
    if model is not None and model.bucket_cap_mb is not None:
        bucket_cap_bytes = max(int(model.bucket_cap_mb * 2**20), 1)
    traffic = _aggregate_traffic(d, bucket_cap_bytes, min_iterations, model)
    return _combine(traffic, model)


def _mib(x: float) -> str:
    return f"{x / 2**20:.2f} MiB"


def too_few_iterations(coll: Collectives, min_iterations: int, what: str) -> str:
    return (
        f"too few iterations recorded ({what}; {len(coll.sizes)} collectives, "
        f"{len(coll.marks) or 'no'} iteration marks): need {min_iterations} steady iterations after "
        "DDP's first; profile more steps or a longer window (TEIRESIAS_PROFILE_SECONDS / _ITERS)"
    )


def settle_iterations(
    coll: Collectives,
    it: Iterations,
    ref: float | None,
    ref_from: str,
    min_iterations: int,
) -> tuple[Iterations | None, str, list[str]]:
    """Check the repeating pattern against what one iteration must move.

    An iteration reduces every gradient byte once, so the pattern's gradient
    bytes must equal the model's (``ref``: the model hook's parameter bytes,
    else the start-up broadcast). A stack of identical blocks repeats many
    times per iteration and passes for that many iterations (one block's skew);
    there the pattern carries 1/k of the model and k patterns make the
    iteration (the hook's iteration marks, when present, count k directly).
    Returns (iterations, "", notes), or (None, reason, notes) when the pattern
    cannot be an iteration: never a skew from a wrong period.
    """
    notes: list[str] = []

    def grad(i: Iterations) -> float:
        return windows_skew(coll.sizes, i)[1] / coll.gradient_factor

    k, why = 1, ""
    by_marks = lag_from_marks(coll.times, coll.marks, it)
    if by_marks is not None and by_marks > it.lag and by_marks % it.lag == 0:
        k, why = by_marks // it.lag, "iteration marks"
    elif ref:
        r = grad(it) / ref
        if r < 1 - ITER_BYTES_TOL:
            kk = round(1 / r)
            if kk >= 2 and abs(kk * r - 1) <= ITER_BYTES_TOL:
                k, why = kk, f"bytes vs {ref_from}"
    if k > 1:
        notes.append(f"a pattern of {it.lag} collectives repeats {k} times per iteration ({why})")
        it = regroup(it, k, coll.times)
        if it.count < min_iterations:
            return None, too_few_iterations(coll, min_iterations, f"{it.count} complete iteration(s)"), notes
    if ref:
        g = grad(it)
        if abs(g / ref - 1) > ITER_BYTES_TOL:
            return (
                None,
                (
                    f"no consistent iteration: the repeating pattern ({it.lag} collectives) reduces "
                    f"{_mib(g)} of gradients but {ref_from} says {_mib(ref)} (an iteration reduces every "
                    "gradient byte once)"
                ),
                notes,
            )
    else:
        notes.append(
            "iteration not checked against the model's size (no model hook; no DDP start-up "
            "broadcast confirmed by a first all-reduce of the whole model)"
        )
    return it, "", notes


def _aggregate_traffic(d: Path, cap: int, min_iterations: int, model: ModelFile | None = None) -> Profile:
    if not d.is_dir():
        return Profile.none(f"no profile directory {d}")
    paths = record_files(d)
    if not paths:
        return Profile.none(
            f"no record files in {d}: the job never communicated (single-rank job, "
            "or it was not run under the profiler)"
        )
    files: list[RecordFile] = []
    for p in paths:
        try:
            files.append(read_record_file(p))
        except RecordFileError as exc:
            return Profile.none(str(exc))
    notes: list[str] = []
    runs = sorted({f.run for f in files})
    if len(runs) > 1:
        # A requeued or torchrun-restarted job profiled again into the same
        # directory: the latest run is the one to trust.
        files = [f for f in files if f.run == runs[-1]]
        notes.append(f"{len(runs)} runs in the directory; using the latest (restart {runs[-1]})")
    world = max(f.world_size for f in files)
    if world == 1:
        return Profile.none("single-rank job: no communication between ranks to profile", ranks=1)
    if any(f.rank < 0 for f in files):
        # Launched without RANK/SLURM_PROCID/MPI variables: number the processes
        # by host and pid; a missing rank can then only be noticed via world_size.
        files = [replace(f, rank=i) for i, f in enumerate(sorted(files, key=lambda f: (f.host, f.pid)))]
        notes.append("ranks unknown (no RANK/SLURM_PROCID); numbered by host and pid")
    ranks = sorted({f.rank for f in files})
    if len(ranks) != len(files):
        return Profile.none(f"{d} holds records of several runs (duplicate ranks); profile one run per directory")
    if world > 0 and ranks != list(range(world)):
        missing = sorted(set(range(world)) - set(ranks))
        return Profile.none(f"record files of rank(s) {missing} missing out of {world}", ranks=len(files))
    killed = [f.rank for f in files if f.state is FileState.RECORDING]
    if killed:
        return Profile.none(
            f"rank(s) {killed} stopped inside the profiling window (job killed mid-profile?)",
            ranks=len(files),
        )
    full = [f.rank for f in files if f.state is FileState.FULL]
    if full:
        notes.append(f"rank(s) {full} hit the record size cap; window shortened")
    cands = [c for c in (gloo_collectives(files), nccl_collectives(files)) if c is not None]
    if not cands:
        return Profile.none("no collective traffic recorded", ranks=len(files))
    coll = max(cands, key=lambda c: float(c.sizes.sum()))
    n = len(files)
    found = find_iterations(coll.sizes, coll.times, min_iterations)
    if found is None:
        return Profile.none(
            too_few_iterations(coll, min_iterations, f"no pattern of collectives repeats {min_iterations} times"),
            ranks=n,
            layer=coll.layer,
        )
    ref: float | None
    if model is not None:
        ref, ref_from = float(model.gradient_bytes), "the model hook's parameter sizes"
    else:
        ref, ref_from = coll.startup_broadcast, "the start-up broadcast of the model"
    it, problem, more = settle_iterations(coll, found, ref, ref_from, min_iterations)
    notes += more
    if it is None:
        return Profile.none(problem, ranks=n, layer=coll.layer, notes=tuple(notes))
    skew, total, largest = windows_skew(coll.sizes, it)
    per_rank = coll.per_rank_sent * (total / float(coll.sizes.sum()))
    model_bytes = total / coll.gradient_factor
    # DDP closes a bucket once it reaches the cap: at most ceil(M / cap) full
    # buckets, plus the small first bucket and a partial last one. Bucketed
    # or not, the collectives are what the network carries: their skew is the
    # one placement uses (docs/profiler.md, "Which skew").
    if model is not None:
        bucketed = len(ddp_buckets(model.sizes, model.bucket_cap_mb)) < len(model.sizes)
    else:
        bucketed = it.lag <= math.ceil(model_bytes / cap) + 2
    largest_t = skew * model_bytes
    lower = max(0.0, (largest_t - cap) / model_bytes) if bucketed and model_bytes > 0 else None
    if bucketed:
        notes.append(
            f"{it.lag} collectives per iteration for {model_bytes / 2**20:.1f} MiB: "
            f"gradient buckets of up to {cap / 2**20:g} MiB, not single tensors"
        )
    return Profile(
        valid=True,
        layer=coll.layer,
        ranks=n,
        iterations=it.count,
        collectives_per_iteration=it.lag,
        bytes_per_iteration=per_rank,
        model_bytes=model_bytes,
        period_s=it.period_s,
        intensity_bps=per_rank / it.period_s if it.period_s > 0 else None,
        skew=skew,
        skew_source="traffic",
        traffic_skew=skew,
        traffic_skew_valid=True,
        bucketed=bucketed,
        skew_lower_bound=lower,
        largest_collective_bytes=largest_t,
        notes=tuple(notes),
    )


def _combine(traffic: Profile, model: ModelFile | None) -> Profile:
    """Add what the model hook knows: the largest-tensor ratio (shown beside)
    and the skew of DDP's buckets of those tensors at the job's bucket cap,
    which checks the traffic figure and stands in where traffic cannot tell."""
    if model is None:
        return traffic
    buckets = ddp_buckets(model.sizes, model.bucket_cap_mb)
    bucket_skew = max(buckets) / sum(buckets)
    data = traffic.to_json()
    data.update(
        model_skew=max(model.sizes) / model.gradient_bytes,
        model_tensors=len(model.sizes),
        model_bucket_skew=bucket_skew,
        model_buckets=len(buckets),
    )
    notes = list(traffic.notes)
    if traffic.traffic_skew_valid and traffic.skew is not None:
        data["agrees"] = abs(traffic.skew - bucket_skew) <= AGREE_TOL
        if not data["agrees"]:
            notes.append(
                f"traffic skew {traffic.skew:.3f} differs from {bucket_skew:.3f}, the skew of "
                f"DDP's {len(buckets)} buckets of the model's tensors"
            )
    else:
        data.update(valid=True, skew=bucket_skew, skew_source="model", reason="")
        notes.append(f"skew of DDP's buckets of the model's tensors ({traffic.reason})")
    data["notes"] = notes
    return Profile.from_json(data)
