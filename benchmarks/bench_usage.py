"""Cost of the in-job usage sampler (wrappers/hooks/usage.py) and of the
controller reading it (slurm_plugin/controller/usage.py).

    .venv/bin/python benchmarks/bench_usage.py [--samples 500]

For process trees of 1, 5 and 20 processes (a shell and sleeping children in
a session of their own, as tsbatch runs a script): CPU time per sample
(psutil over the tree, the NVML path as this machine has it, the file
written), and the share of one core at the default 5 s interval. Then the
controller's read of one job's files (glob, read, combine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from slurm_plugin.controller.usage import combine
from wrappers.hooks.usage import DEFAULT_EVERY_S, Sampler
from wrappers.protocol import read_usage


def tree(children: int) -> subprocess.Popen:
    cmd = " ".join(["sleep 60 &"] * children) + " wait"
    return subprocess.Popen(["bash", "-c", cmd], start_new_session=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=500)
    n = ap.parse_args().samples
    d = Path(tempfile.mkdtemp())
    print("| processes | CPU per sample | share of one core every 5 s | NVML |")
    print("| ---: | ---: | ---: | --- |")
    for children in (0, 4, 19):
        sh = tree(children)
        try:
            root = psutil.Process(sh.pid)
            deadline = time.monotonic() + 10
            while len(root.children()) < children and time.monotonic() < deadline:
                time.sleep(0.05)
            s = Sampler(d, 1, 0, "n1", ["0"], root)
            s.write()
            c0 = time.process_time()
            for _ in range(n):
                s.write()
            per = (time.process_time() - c0) / n
            procs = s.sample().processes
            print(f"| {procs} | {per * 1e3:.2f} ms | {per / DEFAULT_EVERY_S * 100:.3f}% | {s.note or 'read'} |")
        finally:
            os.killpg(sh.pid, 9)
            sh.wait()
    c0 = time.process_time()
    for _ in range(n):
        combine(read_usage(d), 0)
    print(f"\ncontroller: one job's usage files read and combined: {(time.process_time() - c0) / n * 1e6:.0f} us")


if __name__ == "__main__":
    main()
