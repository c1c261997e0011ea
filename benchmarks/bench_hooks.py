"""Cost of the checkpoint hooks (wrappers/hooks): prints figures, asserts nothing.

1. Hook overhead per training step, for a step of about 10 ms (goal <= 1%):
   the same script (DataLoader + Adam + LR scheduler, one thread) run with and
   without the hooks, in alternating subprocesses, median time per step each;
   plus the hooks' absolute cost per step (optimizer.step + DataLoader next on
   a near-empty model, best of 5 x 20,000 calls), which the noise of a shared
   machine cannot hide as it hides a 1% difference in the 10 ms A/B.
2. Checkpoint (save: capture + atomic write + fsync) and restore (secure
   load + load_state_dict) time vs model size: 10 MB, 100 MB, 1 GB of fp32
   parameters (SGD without momentum, so the file is about the model's size).
   The restore includes the integrity check (CRC-32 of every zip member),
   also timed alone (file in the page cache, as in the restore, and after
   evicting it: a read from the disk), beside what a SHA-256 would cost.

Usage:
  .venv/bin/python benchmarks/bench_hooks.py            # everything
  .venv/bin/python benchmarks/bench_hooks.py --sizes-mb 10,100 --rounds 3
  .venv/bin/python benchmarks/bench_hooks.py --json     # one JSON object
  .venv/bin/python benchmarks/bench_hooks.py --checkpoint-only   # only part 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOK_SITE = REPO / "wrappers" / "hooks" / "site"


def _env(hooks: bool, base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_"))}
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTHONPATH", None)
    if hooks:
        env.update(PYTHONPATH=str(HOOK_SITE), TEIRESIAS_CHECKPOINT="1", TEIRESIAS_JOB_BASE=base, SLURM_JOB_ID="1")
    return env


# ---------------------------------------------------------------------- child modes
def child_steps(width: int, steps: int) -> None:
    """Train ``steps`` steps; print the median seconds per step (after warm-up)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(64 * 32, max(width, 1))
    loader = DataLoader(
        TensorDataset(x, x[:, :1]), batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1)) if width else nn.Linear(1, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    times: list[float] = []
    while len(times) < steps:
        t = time.perf_counter()
        for xb, yb in loader:
            loss = ((model(xb) - yb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            now = time.perf_counter()
            times.append(now - t)
            t = now
            if len(times) >= steps:
                break
    print(json.dumps({"median": statistics.median(times[steps // 10 :])}))


def child_micro(n: int) -> None:
    """Cost of one ``optimizer.step()`` and one DataLoader ``next()`` on a
    near-empty model and batch: best of 5 repeats of ``n`` calls (best-of
    discards the other engineers' load on a shared machine)."""
    import timeit

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    it = iter(DataLoader(TensorDataset(torch.randn(6 * n + 10, 1)), batch_size=1))
    step = min(timeit.repeat(opt.step, number=n, repeat=5)) / n
    nxt = min(timeit.repeat(lambda: next(it), number=n, repeat=5)) / n
    out = {"step_us": step * 1e6, "next_us": nxt * 1e6}
    from wrappers.hooks import current

    rt = current()
    if rt is not None:  # the hooks' own work per step, timed directly
        rec = it._teiresias_rec
        hook = min(timeit.repeat(lambda: (rt.on_step(opt), rt.on_next(rec)), number=n, repeat=5)) / n
        out["hook_fn_us"] = hook * 1e6
    print(json.dumps(out))


def child_ckpt(size_mb: int, rounds: int) -> None:
    """Save and restore a model of ``size_mb`` MB through the hooks' own code paths."""
    import torch
    from torch import nn

    from wrappers.hooks import current
    from wrappers.hooks.runtime import Stop

    rt = current()
    assert rt is not None, "hooks not active"
    n = size_mb * 1024 * 1024 // 4
    rows = 1024
    model = nn.Linear(n // rows, rows, bias=False)  # one weight of size_mb MB
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    import hashlib

    from wrappers.hooks.checkpoint import verify_integrity

    save_s, write_s, load_s, sizes, crc_s, sha_s, cold_s = [], [], [], [], [], [], []
    point = {"kind": "none", "ord": -1, "n": -1, "pos": -1}
    rt.usable()
    for _ in range(rounds):
        t = time.perf_counter()
        written, _ = rt.save(Stop.PERIODIC, point)
        save_s.append(time.perf_counter() - t)
        assert written is not None, "the benchmark's checkpoint was not written"
        write_s.append(written.seconds)
        sizes.append(written.bytes)
        fd = os.open(written.path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # this file only: a read from the disk
        os.close(fd)
        t = time.perf_counter()
        verify_integrity(written.path)
        cold_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        verify_integrity(written.path)
        crc_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        digest = hashlib.sha256()
        with open(written.path, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
        sha_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        data = rt.store.load(written.path)
        from wrappers.hooks import state as st

        st.restore_shared(rt.tracked, data["shared"])
        load_s.append(time.perf_counter() - t)
        del data
    del opt
    print(
        json.dumps(
            {
                "save": statistics.median(save_s),
                "write_fsync": statistics.median(write_s),
                "restore": statistics.median(load_s),
                "verify_crc": statistics.median(crc_s),
                "verify_crc_cold": statistics.median(cold_s),
                "sha256": statistics.median(sha_s),
                "bytes": sizes[-1],
            }
        )
    )


# ---------------------------------------------------------------------- parent
def _child(args: list[str], hooks: bool, base: str, timeout: float = 900) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, *args], env=_env(hooks, base), capture_output=True, text=True, timeout=timeout
    )
    if r.returncode != 0:
        raise SystemExit(f"bench child failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_overhead(width: int, steps: int, rounds: int, base: str) -> dict:
    plain, hooked = [], []
    for _ in range(rounds):  # alternate, so load changes hit both alike
        plain.append(_child(["--child-steps", str(width), str(steps)], False, base)["median"])
        hooked.append(_child(["--child-steps", str(width), str(steps)], True, base)["median"])
    p, h = statistics.median(plain), statistics.median(hooked)
    return {"width": width, "plain_ms": p * 1e3, "hooked_ms": h * 1e3, "overhead_pct": (h - p) / p * 100}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mb", default="10,100,1024", help="model sizes in MB (default 10,100,1024)")
    ap.add_argument("--rounds", type=int, default=3, help="repetitions of each measurement (default 3)")
    ap.add_argument("--width", type=int, default=768, help="hidden width giving a ~10 ms step (default 768)")
    ap.add_argument("--steps", type=int, default=300, help="steps per overhead run (default 300)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--checkpoint-only", action="store_true", help="only the checkpoint save/restore figures")
    ap.add_argument("--child-steps", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-ckpt", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-micro", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_steps:
        return child_steps(*a.child_steps)
    if a.child_ckpt:
        return child_ckpt(*a.child_ckpt)
    if a.child_micro:
        return child_micro(a.child_micro)

    out: dict = {"machine": f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", "torch_threads": 1}
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as base:
        if not a.checkpoint_only:
            out["step_10ms"] = bench_overhead(a.width, a.steps, a.rounds, base)
            plain = _child(["--child-micro", "20000"], False, base)
            hooked = _child(["--child-micro", "20000"], True, base)
            cost = (hooked["step_us"] - plain["step_us"]) + (hooked["next_us"] - plain["next_us"])
            out["per_step_micro"] = {
                "plain": plain,
                "hooked": hooked,
                "hook_cost_us": cost,
                "pct_of_10ms_step": cost / 10_000 * 100,
                "hook_fn_pct_of_10ms_step": hooked["hook_fn_us"] / 10_000 * 100,
            }
        out["checkpoint"] = []
        for mb in (int(s) for s in a.sizes_mb.split(",") if s):
            r = _child(["--child-ckpt", str(mb), str(a.rounds)], True, base)
            r["size_mb"] = mb
            out["checkpoint"].append(r)
    if a.json:
        print(json.dumps(out))
        return
    print(f"machine: {out['machine']}")
    if not a.checkpoint_only:
        _print_overhead(out)
    print(
        f"{'model':>8} {'file':>10} {'save s':>8} {'of which write+fsync':>21} {'restore s':>10} "
        f"{'of which CRC check':>19} {'(SHA-256 would be)':>19} {'CRC from disk':>14} {'save GB/s':>10}"
    )
    for c in out["checkpoint"]:
        print(
            f"{c['size_mb']:>6}MB {c['bytes'] / 2**20:>8.1f}MB {c['save']:>8.3f} {c['write_fsync']:>21.3f} "
            f"{c['restore']:>10.3f} {c['verify_crc']:>19.3f} {c['sha256']:>19.3f} {c['verify_crc_cold']:>14.3f} "
            f"{c['bytes'] / c['save'] / 1e9:>10.2f}"
        )


def _print_overhead(out: dict) -> None:
    s = out["step_10ms"]
    print(
        f"step of ~10 ms (width {s['width']}): plain {s['plain_ms']:.2f} ms, hooked {s['hooked_ms']:.2f} ms, "
        f"overhead {s['overhead_pct']:+.2f}%"
    )
    t = out["per_step_micro"]
    print(
        f"per step, near-empty model: optimizer.step {t['plain']['step_us']:.1f} -> {t['hooked']['step_us']:.1f} us, "
        f"DataLoader next {t['plain']['next_us']:.1f} -> {t['hooked']['next_us']:.1f} us; hooks cost "
        f"{t['hook_cost_us']:.2f} us/step = {t['pct_of_10ms_step']:.3f}% of a 10 ms step "
        f"(A/B of noisy calls); the hook functions alone: {t['hooked']['hook_fn_us']:.2f} us/step = "
        f"{t['hook_fn_pct_of_10ms_step']:.3f}%"
    )


if __name__ == "__main__":
    main()
