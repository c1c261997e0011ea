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
3. Skew = largest collective / all collective bytes of an iteration, median
   over the steady iterations (Tiresias Table 6's "largest tensor ratio" when
   each tensor is its own collective).
4. Bucketing. With DDP's default 25 MiB buckets a collective is a bucket; for
   models under about 2 x cap the figure measures bucket layout, not tensors,
   and is reported as unknown (with the lower bound (B - cap) / model a bucket
   closed at the cap implies). The exact ratio from the model hook, when
   present, validates the traffic figure and stands in when traffic cannot tell.

Never a wrong skew: missing ranks, truncated files, a job killed inside its
window, a single-rank job or too few iterations give ``valid=False`` and a reason.
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
MODEL_FILE_PREFIX = "model-rank"
REPEAT_SLACK = 0.05  # chosen lag may cover this much less of the run than the best lag
AGREE_TOL = 0.05  # traffic vs model skew agreement


@dataclass(frozen=True)
class Profile:
    """What the profiler learnt about one job (JSON-serialisable).

    ``skew`` is the figure placement uses (None when unknown), from
    ``skew_source`` ("traffic" or "model"). ``bytes_per_iteration`` is what one
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
    model_skew: float | None = None
    model_tensors: int = 0
    agrees: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_json(cls, data: dict) -> "Profile":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["notes"] = tuple(kw.get("notes", ()))
        return cls(**kw)

    @classmethod
    def none(cls, reason: str, **kw: object) -> "Profile":
        """The "no profile" result: placement must treat the skew as unknown."""
        return cls(valid=False, reason=reason, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Collectives:
    """One job's collectives in issue order (reference rank's clock)."""

    sizes: np.ndarray  # float64 bytes (summed over ranks for gloo)
    times: np.ndarray  # float64 seconds
    per_rank_sent: float  # bytes one rank sends for all of them (mean over ranks)
    layer: str


@dataclass(frozen=True)
class Iterations:
    lag: int  # collectives per iteration
    start: int  # first collective of the steady run
    count: int  # complete iterations in the steady run
    period_s: float


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
    return Collectives(
        sizes=sizes[order],
        times=times[order],
        per_rank_sent=float(nbytes.sum()) / len(files),
        layer="gloo",
    )


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
    return Collectives(sizes=sizes, times=r["t_ns"].astype(np.float64) / 1e9,
                       per_rank_sent=sent, layer="nccl")


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
    return Iterations(lag=k, start=a, count=count, period_s=period)


def windows_skew(sizes: np.ndarray, it: Iterations) -> tuple[float, float, float]:
    """Median over steady iterations of (largest / total, total, largest)."""
    skews, totals, larg = [], [], []
    for j in range(it.count):
        w = sizes[it.start + j * it.lag: it.start + (j + 1) * it.lag]
        if len(w) < it.lag:
            break
        skews.append(float(w.max() / w.sum()))
        totals.append(float(w.sum()))
        larg.append(float(w.max()))
    return float(np.median(skews)), float(np.median(totals)), float(np.median(larg))


# ---- model hook ----------------------------------------------------------------------

def read_model_file(profile_dir: Path) -> list[int] | None:
    """Parameter byte sizes written by profiler.model_hook (lowest rank), or None."""
    cands = sorted(profile_dir.glob(MODEL_FILE_PREFIX + "*.json"))
    for p in cands:
        try:
            data = json.loads(p.read_text())
            sizes = [int(b) for _, b in data["tensors"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if sizes and sum(sizes) > 0:
            return sizes
    return None


# ---- the whole job -------------------------------------------------------------------

def aggregate_dir(
    profile_dir: str | os.PathLike[str],
    *,
    bucket_cap_bytes: int = DEFAULT_BUCKET_CAP,
    min_iterations: int = 3,
) -> Profile:
    """Aggregate every rank's record file in ``profile_dir`` into one Profile."""
    d = Path(profile_dir)
    model_sizes = read_model_file(d) if d.is_dir() else None
    model_kw: dict = {}
    if model_sizes:
        model_kw = {"model_skew": max(model_sizes) / sum(model_sizes), "model_tensors": len(model_sizes)}
    traffic = _aggregate_traffic(d, bucket_cap_bytes, min_iterations)
    return _combine(traffic, model_kw)


def _aggregate_traffic(d: Path, cap: int, min_iterations: int) -> Profile:
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
    it = find_iterations(coll.sizes, coll.times, min_iterations)
    if it is None:
        return Profile.none(
            f"no repeating iteration in {len(coll.sizes)} collectives (fewer than "
            f"{min_iterations} iterations recorded?)",
            ranks=len(files), layer=coll.layer,
        )
    skew, total, largest = windows_skew(coll.sizes, it)
    n = len(files)
    per_rank = coll.per_rank_sent * (total / float(coll.sizes.sum()))
    if coll.layer == "gloo":
        # Every byte of a ring all-reduce is sent once by some rank: total over
        # ranks = 2(n-1) x tensor bytes.
        model_bytes = total / (2.0 * (n - 1))
    else:
        model_bytes = total
    bucket_bound = math.ceil(model_bytes / cap) + 2
    # DDP closes a bucket once it reaches the cap: at most ceil(M / cap) full
    # buckets, plus the small first bucket and a partial last one.
    bucketed = it.lag <= bucket_bound
    largest_t = skew * model_bytes
    lower = max(0.0, (largest_t - cap) / model_bytes) if bucketed and model_bytes > 0 else None
    traffic_ok = not (bucketed and model_bytes < 2 * cap)
    if bucketed:
        notes.append(
            f"{it.lag} collectives per iteration for {model_bytes / 2**20:.1f} MiB: "
            f"looks like {cap / 2**20:.0f} MiB gradient buckets"
        )
    return Profile(
        valid=traffic_ok,
        reason="" if traffic_ok else (
            f"bucketing hides the tensors: model {model_bytes / 2**20:.1f} MiB < 2 x "
            f"{cap / 2**20:.0f} MiB bucket cap; skew >= {lower:.3f}"
        ),
        layer=coll.layer,
        ranks=n,
        iterations=it.count,
        collectives_per_iteration=it.lag,
        bytes_per_iteration=per_rank,
        model_bytes=model_bytes,
        period_s=it.period_s,
        intensity_bps=per_rank / it.period_s if it.period_s > 0 else None,
        skew=skew if traffic_ok else None,
        skew_source="traffic" if traffic_ok else None,
        traffic_skew=skew,
        traffic_skew_valid=traffic_ok,
        bucketed=bucketed,
        skew_lower_bound=lower,
        largest_collective_bytes=largest_t,
        notes=tuple(notes),
    )


def _combine(traffic: Profile, model_kw: dict) -> Profile:
    """Add the model hook's exact ratio: it validates the traffic figure and
    stands in where traffic cannot tell (small bucketed models, no traffic)."""
    if not model_kw:
        return traffic
    ms = model_kw["model_skew"]
    data = traffic.to_json()
    data.update(model_kw)
    notes = list(traffic.notes)
    if traffic.traffic_skew_valid and traffic.skew is not None and traffic.bucketed:
        # Bucket layout is not a tensor ratio: nothing to compare.
        notes.append(f"model's largest-tensor ratio {ms:.3f} (traffic sees buckets)")
    elif traffic.traffic_skew_valid and traffic.skew is not None:
        data["agrees"] = abs(traffic.skew - ms) <= AGREE_TOL
        if not data["agrees"]:
            notes.append(f"traffic skew {traffic.skew:.3f} differs from model ratio {ms:.3f}")
    else:
        data.update(valid=True, skew=ms, skew_source="model")
        notes.append(f"skew from the model's tensor sizes ({traffic.reason or 'traffic cannot tell'})")
        data["reason"] = ""
    data["notes"] = notes
    return Profile.from_json(data)
