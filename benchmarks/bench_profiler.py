"""Cost of the communication profiler's interposer (goal: <= 2 % of iteration
time while profiling, ~0 after the window).

Two measurements, each side by side in one run:
1. Per call: a small C program (built here with cc) sends gloo-shaped
   messages over a loopback TCP connection (writev of header + payload, then
   recv of header and payload: 3 intercepted calls per message) and reads
   48-byte blocks from /dev/zero (a non-socket fd). Modes: no LD_PRELOAD,
   preloaded but inert (no TEIRESIAS_PROFILE_DIR), recording, window over.
2. Per iteration: a real 2-rank gloo DDP job (torchrun, CPU) without the
   interposer, recording, and after its window; mean step time of each, and
   the logged calls per iteration x cost per call / step time.

Usage: .venv/bin/python benchmarks/bench_profiler.py [--messages 200000] [--iters 60] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import profiler
from profiler.aggregate import aggregate_dir
from profiler.env import ProfileWindow, profiling_env
from profiler.records import read_record_file, record_files

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "tests" / "fixtures" / "profiler" / "train_ddp.py"

C_BENCH = r"""
/* In one process, alternate batches of calls through the (possibly
 * interposed) libc symbols with batches through libc's own functions, found
 * with dlopen("libc.so.6", RTLD_NOLOAD): the paired difference is the
 * interposer's cost, free of process-to-process noise. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*writev_t)(int, const struct iovec *, int);
typedef ssize_t (*recv_t)(int, void *, size_t, int);
typedef ssize_t (*read_t)(int, void *, size_t);

static double now(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y);
}

static int cli, con, zero;
static uint64_t hdr[6] = {48 + 64, 1, 0, 0, 64, 0};
static char payload[64], rbuf[64];

static double msgs(long n, writev_t wv, recv_t rc, long base) {
    struct iovec iov[2] = {{hdr, 48}, {payload, 64}};
    double t0 = now();
    for (long i = 0; i < n; i++) {
        hdr[2] = ((uint64_t)4 << 56) | ((uint64_t)((base + i) & 0xffff) << 24);
        if (wv(cli, iov, 2) != 112 || rc(con, rbuf, 48, 0) != 48 || rc(con, rbuf, 64, 0) != 64) exit(1);
    }
    return (now() - t0) / n * 1e9;
}
static double reads(long n, read_t rd) {
    double t0 = now();
    for (long i = 0; i < n; i++) if (rd(zero, rbuf, 64) != 64) exit(2);
    return (now() - t0) / n * 1e9;
}

int main(int argc, char **argv) {
    long total = atol(argv[1]), batch = 500, nb = total / batch;
    int srv = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    bind(srv, (struct sockaddr *)&a, sizeof(a)); listen(srv, 1);
    getsockname(srv, (struct sockaddr *)&a, &al);
    cli = socket(AF_INET, SOCK_STREAM, 0);
    connect(cli, (struct sockaddr *)&a, sizeof(a));
    con = accept(srv, NULL, NULL);
    zero = open("/dev/zero", O_RDONLY);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    writev_t d_writev = (writev_t)dlsym(libc, "writev");
    recv_t d_recv = (recv_t)dlsym(libc, "recv");
    read_t d_read = (read_t)dlsym(libc, "read");
    double *dm = malloc(sizeof(double) * nb), *dr = malloc(sizeof(double) * nb);
    double *bm = malloc(sizeof(double) * nb), *br = malloc(sizeof(double) * nb);
    for (long b = 0; b < nb; b++) {
        double mi, md, ri, rd;
        if (b & 1) { md = msgs(batch, d_writev, d_recv, b * batch); mi = msgs(batch, writev, recv, b * batch); }
        else       { mi = msgs(batch, writev, recv, b * batch); md = msgs(batch, d_writev, d_recv, b * batch); }
        if (b & 1) { rd = reads(batch, d_read); ri = reads(batch, read); }
        else       { ri = reads(batch, read); rd = reads(batch, d_read); }
        dm[b] = mi - md; dr[b] = ri - rd; bm[b] = md; br[b] = rd;
    }
    qsort(dm, nb, sizeof(double), cmp); qsort(dr, nb, sizeof(double), cmp);
    qsort(bm, nb, sizeof(double), cmp); qsort(br, nb, sizeof(double), cmp);
    printf("{\"msg_ns\": %.1f, \"msg_extra_ns\": %.1f, \"read_ns\": %.1f, \"read_extra_ns\": %.1f}\n",
           bm[nb / 2], dm[nb / 2], br[nb / 2], dr[nb / 2]);
    return 0;
}
"""


def build_c(tmp: Path) -> Path:
    src, exe = tmp / "bench.c", tmp / "bench"
    src.write_text(C_BENCH)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src), "-ldl"], check=True)
    return exe


def c_modes(tmp: Path) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TEIRESIAS_PROFILE") and k != "LD_PRELOAD"}
    lib = str(profiler.library_path())
    rec = dict(base, **profiling_env(tmp / "rec", ProfileWindow(seconds=600, max_bytes=256 << 20), base_env=base))
    done = dict(base, **profiling_env(tmp / "done", ProfileWindow(seconds=1e-6), base_env=base))
    return {"no preload": base, "preloaded, inert": dict(base, LD_PRELOAD=lib), "recording": rec, "after window": done}


def bench_calls(n: int, repeats: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        exe = build_c(tmp)
        for _ in range(repeats):  # interleave modes so drift hits them alike
            for mode, env in c_modes(tmp).items():
                for d in ("rec", "done"):
                    for f in record_files(tmp / d / "profile"):
                        f.unlink()
                r = json.loads(
                    subprocess.run([str(exe), str(n)], env=env, check=True, capture_output=True, text=True).stdout
                )
                for k, v in r.items():
                    out.setdefault(mode, {}).setdefault(k, []).append(v)
    # Best process: on a shared machine interference only ever adds time.
    return {m: {k: min(v) for k, v in d.items()} for m, d in out.items()}


def run_job(tmp: Path, mode: str, iters: int, model: str) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEIRESIAS_PROFILE") and k != "LD_PRELOAD"}
    if mode == "recording":
        env.update(profiling_env(tmp, ProfileWindow(seconds=600, max_bytes=256 << 20), base_env=env))
    elif mode == "after window":
        env.update(profiling_env(tmp, ProfileWindow(seconds=1e-6), base_env=env))
    out = tmp / "truth.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(TRAIN),
        "--model",
        model,
        "--bucket",
        "tiny",
        "--iters",
        str(iters),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    # torch 2.13 sometimes aborts in C++ teardown after both ranks finished
    # (with or without the profiler); such a run still measured its steps.
    if proc.returncode != 0 and proc.stderr.count("train_ddp: rank ") < 2:
        raise SystemExit(f"training job failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    calls = 0
    if mode == "recording":
        files = record_files(tmp / "profile")
        calls = sum(len(read_record_file(f).records) for f in files) // max(len(files), 1)
        p = aggregate_dir(tmp / "profile")
        calls = int(calls / max(p.iterations, 1)) if p.valid else calls // iters
    return json.loads(out.read_text())["step_s"], calls


def bench_iterations(iters: int, repeats: int, model: str) -> dict[str, tuple[float, int]]:
    steps: dict[str, list[float]] = {}
    calls = 0
    for _ in range(repeats):
        for mode in ("no preload", "recording", "after window"):
            with tempfile.TemporaryDirectory() as t:
                s, c = run_job(Path(t), mode, iters, model)
            steps.setdefault(mode, []).append(s)
            calls = max(calls, c)
    return {m: (min(v), calls) for m, v in steps.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", default="vgg,resnet")
    args = ap.parse_args()

    calls = bench_calls(args.messages, args.repeats)
    print(
        f"1. per call: {args.messages} gloo-shaped messages over loopback TCP (writev + 2 x recv = 3 "
        f"intercepted calls) and {args.messages} 64-byte read()s of /dev/zero, in batches of 500 alternating "
        f"with libc's own functions; median paired difference, best of {args.repeats} processes:"
    )
    print(f"   {'mode':<18} {'message':>10} {'+ per call':>11} {'read()':>9} {'+ per call':>11}")
    per_call_rec = 0.0
    for mode, r in calls.items():
        extra = r["msg_extra_ns"] / 3
        if mode == "recording":
            per_call_rec = extra
        print(
            f"   {mode:<18} {r['msg_ns']:>7.0f} ns {extra:>8.0f} ns {r['read_ns']:>6.0f} ns {r['read_extra_ns']:>8.0f} ns"
        )

    print(
        f"2. per iteration: 2-rank gloo DDP (torchrun, CPU, one collective per tensor), "
        f"{args.iters} iterations, best mean step of {args.repeats} runs:"
    )
    for model in args.models.split(","):
        res = bench_iterations(args.iters, args.repeats, model)
        b, n = res["no preload"]
        for mode, (s, _) in res.items():
            print(f"   {model:<7} {mode:<14} step {s * 1e3:7.2f} ms  ({(s / b - 1) * 100:+5.1f} % vs no preload)")
        est = n * per_call_rec * 1e-9 / b * 100
        print(f"   {model:<7} {n} logged calls/iteration/rank x {per_call_rec:.0f} ns = {est:.3f} % of the step")


if __name__ == "__main__":
    main()
