"""Server-wide time-slicing and packing of 1-GPU jobs (Gandiva §4.1, §4.2.2; Figure 9).

The paper's "six 1-GPU jobs time-sharing 4 GPUs" gives each job 4 of every 6
minutes: the jobs of a server rotate across its GPUs, and a suspended job may
resume on another GPU than the one it left. Here the 1-GPU jobs of a node form
a ``Pool``. A job started alone is bound to its GPU (live: its shard type); a
job that joins an over-subscribed node is bound to all of the pool's GPUs (a
shard of each) and runs on one at a time. Each round, per pool:

- ``rotate``: GPUs whose runner's slice is over go, in turn, to the members
  suspended longest, then to the runners that ran shortest; a job bound to
  one GPU takes only that one, the others fill the rest (on the GPU they ran
  on last where it is free). So every member gets the same share of the
  node's GPUs over a cycle, whatever GPU it started on.
- ``join``: a 1-GPU newcomer on an over-subscribed node (Algorithm 1 line 12)
  runs its first slice at once, on the GPU of the member that has run longest.
- ``introspect``: greedy packing by introspection (§4.2.2), only while members
  wait (overload): the waiting job of lowest measured utilisation runs at once
  with the job(s) on the GPU of lowest utilisation where the sum stays within
  ``pack_util`` and memory fits; a packed GPU whose measured throughput
  (sum of solo / packed mini-batch time) loses to time-slicing's 1 is
  unpacked, and its jobs are not packed together again: the next round tries
  the next GPU ("we undo the packing and try the next lowest utilization GPU").
  Without a measured utilisation nothing is packed (no blind trials).
"""

from __future__ import annotations

from teiresias.domain import Colocation, Job, JobId, Placement
from teiresias.policy.gandiva.state import Pool, Round, is_floater


def _since(j: Job) -> float:
    return j.slice_since if j.slice_since is not None else float("-inf")


def _util(j: Job) -> float | None:
    return j.usage.utilisation if j.usage is not None else None


def _options(j: Job, pool: Pool) -> list[int]:
    """The GPUs of ``pool`` ``j`` may run on."""
    if is_floater(j):
        return [g for g in j.bound_gpus if g in pool.gpus]
    return [g for g in j.bound_gpus[:1] if g in pool.gpus]


def _refresh_idle(r: Round, pool: Pool) -> None:
    """The pool's GPUs nobody runs on after the plan and no suspended job is bound to."""
    used = {r.device[m.job_id] for m in pool.members if r.runs[m.job_id]}
    used |= {r.device[m.job_id] for m in pool.members if not is_floater(m)}
    for g in pool.gpus:
        if g in used:
            r.occupy(pool.node, g)
        else:
            r.release(pool.node, g)


def rotate(r: Round, slice_len: float) -> float:
    """One turn of every pool's round robin; returns the next slice end (inf: none)."""
    now = r.snapshot.now
    wake = float("inf")
    for pool in r.pools.values():
        wake = min(wake, _rotate_pool(r, pool, slice_len, now))
    return wake


def _rotate_pool(r: Round, pool: Pool, slice_len: float, now: float) -> float:
    runs, device = r.runs, r.device
    members = pool.members
    # A turn: a runner's slice ended since the pool last changed (or a whole slice passed
    # without any change). Between turns a round only hands out idle GPUs: a runner kept
    # through the last turn is not displaced by the next round (the controller runs one
    # every poll, the simulator at slice ends; both must decide the same).
    last = max((_since(m) for m in members if m.slice_since is not None), default=float("-inf"))
    turn = now >= last + slice_len or any(
        runs[m.job_id] and last < _since(m) + slice_len <= now for m in members if m.job_id not in r.touched
    )
    keep = [
        m
        for m in members
        if runs[m.job_id]
        and (not turn or m.job_id in r.touched or r.packed.get(m.job_id) or now - _since(m) < slice_len)
    ]
    kept_ids = {m.job_id for m in keep}
    # Waiting: suspended before now (one suspended at this very instant, by an earlier round
    # at the same time, waits for the next turn: else it would take back the GPU it just left).
    waiting = sorted(
        (m for m in members if not runs[m.job_id] and m.job_id not in r.touched and _since(m) < now),
        key=lambda m: (_since(m), m.job_id),
    )
    if not waiting:
        return _next_turn(r, pool, slice_len, now)
    kept = {device[m.job_id] for m in keep}
    free = [g for g in pool.gpus if g not in kept]
    due = sorted(
        (m for m in members if runs[m.job_id] and m.job_id not in kept_ids), key=lambda m: (-_since(m), m.job_id)
    )
    # Who runs next: longest suspended first, then the runners that ran shortest; a job
    # bound to one GPU needs that one free, the others need any free GPU they may use.
    claimed: dict[int, Job] = {}
    floating: list[Job] = []
    for c in [*waiting, *due]:
        if len(claimed) + len(floating) >= len(free):
            break
        opts = [g for g in _options(c, pool) if g in free]
        if not opts:
            continue
        if is_floater(c):
            floating.append(c)
        elif opts[0] not in claimed:
            claimed[opts[0]] = c
    placed: dict[JobId, int] = {g_job.job_id: g for g, g_job in claimed.items()}
    left = [g for g in free if g not in claimed]
    for f in floating:
        opts = [g for g in _options(f, pool) if g in left]
        if not opts:
            continue
        g = device[f.job_id] if device[f.job_id] in opts else opts[0]
        placed[f.job_id] = g
        left.remove(g)
    # Enact: due runners not placed are suspended, waiting ones placed resume.
    resumed = [m for m in waiting if m.job_id in placed]
    for m in due:
        if m.job_id in placed:
            # Kept running (its slice goes on): on another GPU if the turn moved it.
            g = placed[m.job_id]
            if g != device[m.job_id]:
                r.devices[m.job_id] = g
                r.notes[m.job_id] = f"device: runs on GPU {g} of {pool.node} from now (was GPU {device[m.job_id]})"
                device[m.job_id] = g
                r.touched.add(m.job_id)
            continue
        runs[m.job_id] = False
        r.touched.add(m.job_id)
        nxt = next((w for w in resumed if placed[w.job_id] == device[m.job_id]), None)
        r.notes[m.job_id] = (
            f"suspend: its {slice_len:g} s slice is over ({now - _since(m):.0f} s run); "
            + (f"job {nxt.job_id} resumes on its GPU" if nxt is not None else "others of the node take its turn")
            + f" ({pool.size} jobs time-slice {len(pool.gpus)} GPU(s) of {pool.node})"
        )
    for m in resumed:
        g = placed[m.job_id]
        runs[m.job_id] = True
        r.touched.add(m.job_id)
        moved = g != device[m.job_id]
        if is_floater(m):
            r.devices[m.job_id] = g
        device[m.job_id] = g
        r.notes[m.job_id] = (
            f"resume: its turn on GPU {g} of {pool.node}"
            + (" (another GPU than before)" if moved else "")
            + f", suspended {now - _since(m):.0f} s ({pool.size} jobs on {len(pool.gpus)} GPU(s))"
        )
    _refresh_idle(r, pool)
    return _next_turn(r, pool, slice_len, now)


def _next_turn(r: Round, pool: Pool, slice_len: float, now: float) -> float:
    """When a runner's slice ends while a member waits (inf: nobody waits)."""
    if all(r.runs[m.job_id] for m in pool.members):
        return float("inf")
    ends = [
        now + slice_len if m.job_id in r.touched else _since(m) + slice_len
        for m in pool.members
        if r.runs[m.job_id] and not r.packed.get(m.job_id)
    ]
    ends = [e for e in ends if e > now] or [now + slice_len]
    return min(ends)


def join_target(r: Round, job: Job, max_height: int) -> tuple[Pool, int, str] | str | None:
    """Algorithm 1 line 12 for a 1-GPU job: the least loaded node of affinity 1 whose pool
    may grow (at most ``max_height`` jobs per GPU) and has a runner to hand over from.
    (pool, GPU the newcomer runs on first, why); a reason string when every such pool is
    full; None when there is no node of affinity 1."""
    order = {n.name: i for i, n in enumerate(r.snapshot.cluster.nodes)}
    unavailable = r.snapshot.unavailable
    cands: list[tuple[float, int, Pool, int]] = []
    full = False
    for node, pool in r.pools.items():
        if r.aff.get(node) != 1 or unavailable.get(node, 0) or not pool.gpus:
            continue
        if pool.size + 1 > max_height * len(pool.gpus):
            full = True
            continue
        allowed = [g for g in job.bound_gpus if g in pool.gpus] if job.bound_gpus else pool.gpus
        runners = [
            m
            for m in pool.members
            if r.runs[m.job_id]
            and m.job_id not in r.touched
            and not r.packed.get(m.job_id)
            and m.job_id not in r.start
            and r.device[m.job_id] in allowed
        ]
        if not runners:
            continue
        longest = min(runners, key=lambda m: (_since(m), m.job_id))
        cands.append((r.load(node), order.get(node, 0), pool, r.device[longest.job_id]))
    if cands:
        _, _, pool, gpu = min(cands, key=lambda c: (c[0], c[1]))
        return pool, gpu, f"over-subscribed: {pool.size + 1} jobs time-slice {len(pool.gpus)} GPU(s) of {pool.node}"
    if full:
        return f"waits: every node of 1-GPU jobs already time-slices {max_height} jobs per GPU (--max-height)"
    return None


def hand_over(r: Round, pool: Pool, job: Job, gpu: int, why: str) -> None:
    """``job`` joins ``pool`` and runs its first slice on GPU ``gpu`` at once (early feedback,
    §4.1); whoever ran there is suspended. It is bound to every GPU of the pool it may use."""
    bound = tuple(pool.gpus) if not job.bound_gpus else tuple(g for g in job.bound_gpus if g in pool.gpus)
    partners = tuple(m.job_id for m in pool.members if m.job_id not in r.start)  # running ones
    for m in pool.members:
        if r.runs[m.job_id] and r.device[m.job_id] == gpu:
            r.runs[m.job_id] = False
            r.touched.add(m.job_id)
            r.notes[m.job_id] = f"suspend: job {job.job_id} joins {pool.node} and runs its first slice on GPU {gpu}"
    r.start[job.job_id] = Placement.on({pool.node: (gpu,)})
    r.colocate[job.job_id] = Colocation(
        partners=partners,
        mode="slice",
        reason=f"{why}; it runs on GPU {gpu} first and may run on GPU(s) {','.join(map(str, bound))}",
        gpus=bound,
    )
    r.add_to_pool(job, pool.node, gpu, bound)
    r.touched.add(job.job_id)
    r.occupy(pool.node, gpu)


def introspect(r: Round, pack_util: float, settle: float) -> float:
    """Unpack packed GPUs whose measured throughput lost; pack the lightest waiting jobs onto
    the lightest GPUs (§4.2.2). Returns when a packed GPU can next be judged (inf: none)."""
    now = r.snapshot.now
    wake = float("inf")
    for pool in r.pools.values():
        wake = min(wake, _judge(r, pool, settle, now))
        _pack(r, pool, pack_util, settle, now)
    return wake


def _on(r: Round, pool: Pool, gpu: int) -> list[Job]:
    return [m for m in pool.members if r.runs[m.job_id] and r.device[m.job_id] == gpu]


def _judge(r: Round, pool: Pool, settle: float, now: float) -> float:
    wake = float("inf")
    for gpu in pool.gpus:
        on = _on(r, pool, gpu)
        if len(on) < 2 or not all(r.packed.get(m.job_id) for m in on):
            continue
        since = max(_since(m) for m in on)
        if now - since < settle:
            wake = min(wake, since + settle)
            continue
        if any(not m.step_time or not m.solo_step_time for m in on):
            continue
        tput = sum(m.solo_step_time / m.step_time for m in on if m.step_time and m.solo_step_time)
        if tput >= 1.0:
            continue
        rates = ", ".join(f"job {m.job_id} {m.solo_step_time:.3g}/{m.step_time:.3g} s" for m in on)
        keep = min(on, key=lambda m: (m.first_start_time or 0.0, m.job_id))
        for m in on:
            r.unpack.append(m.job_id)
            r.touched.add(m.job_id)
            r.packed[m.job_id] = False
            r.runs[m.job_id] = m is keep
            r.notes[m.job_id] = (
                f"unpack: packed throughput {tput:.2f} < 1.00 of time-slicing on GPU {gpu} of {pool.node}"
                f" (solo/packed mini-batch: {rates}); not packed with these jobs again"
            )
    return wake


def _fits_memory(jobs: list[Job]) -> bool | None:
    if any(m.usage is None or m.usage.gpu_mem_used is None or m.usage.gpu_mem_total is None for m in jobs):
        return None
    used = sum(m.usage.gpu_mem_used or 0 for m in jobs if m.usage is not None)
    return used <= min(m.usage.gpu_mem_total or 0 for m in jobs if m.usage is not None)


def _pack(r: Round, pool: Pool, pack_util: float, settle: float, now: float) -> None:
    def profiled(m: Job) -> bool:
        # Jobs arrive in exclusive mode and are profiled first (§4.2.2).
        return (
            m.first_start_time is not None
            and now - m.first_start_time >= settle
            and m.solo_step_time is not None
            and _util(m) is not None
        )

    waiting = [m for m in pool.members if not r.runs[m.job_id] and m.job_id not in r.touched and profiled(m)]
    if not waiting:
        return
    load: dict[int, float] = {}
    for gpu in pool.gpus:
        on = _on(r, pool, gpu)
        if on and all(profiled(m) and m.job_id not in r.touched for m in on):
            load[gpu] = sum(_util(m) or 0.0 for m in on)
    for j in sorted(waiting, key=lambda m: (_util(m) or 0.0, m.job_id)):
        uj = _util(j) or 0.0
        best: tuple[float, int] | None = None
        for gpu in _options(j, pool):
            if gpu not in load:
                continue
            on = _on(r, pool, gpu)
            if any(m.job_id in j.pack_failed_with or j.job_id in m.pack_failed_with for m in on):
                continue
            if load[gpu] + uj > pack_util or _fits_memory([*on, j]) is False:
                continue
            if best is None or (load[gpu], gpu) < best:
                best = (load[gpu], gpu)
        if best is None:
            continue
        gpu = best[1]
        on = _on(r, pool, gpu)
        r.runs[j.job_id] = True
        if is_floater(j):
            r.devices[j.job_id] = gpu
        r.device[j.job_id] = gpu
        utils = " + ".join(f"{_util(m) or 0.0:.0f}" for m in [*on, j])
        mem = _fits_memory([*on, j])
        why = (
            f"pack: job {j.job_id} (utilisation {uj:.0f}%, the lowest waiting) onto GPU {gpu} of {pool.node}"
            f" (the lowest loaded: {load[gpu]:.0f}%): {utils} = {load[gpu] + uj:.0f}% <= {pack_util:g}%"
            + ("" if mem is None else ", memory fits")
        )
        for m in [*on, j]:
            r.packed[m.job_id] = True
            r.touched.add(m.job_id)
            if m.job_id not in r.pack:
                r.pack.append(m.job_id)
            r.notes[m.job_id] = why
        load[gpu] += uj
    _refresh_idle(r, pool)
