"""Programs started by a process that handles USR1/USR2 (wrappers/hooks/children.py):
real processes, real signals, no torch. The live case (torchrun's workers under the
real batch script) is tests/torch/test_hooks_signals.py; this one is fast and
covers each way of starting a program.

A parent with a Python handler for USR1 (as the hooks install one) starts a child
and sends it USR1 every millisecond from the moment the start call returns: a
child still in Python's startup (before sitecustomize ignores the signal), or a
program that is not Python, dies of it unless it was started with the signal
held. The same parent without ``children.install()`` shows the signals land in
that window (its children die)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

HOOK_SITE = REPO / "wrappers" / "hooks" / "site"

PARENT = r"""
import json, multiprocessing, os, signal, subprocess, sys, time

def hammer(pid, seconds=0.3):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        time.sleep(0.001)


if __name__ == "__main__":  # (a spawned child imports this file as __mp_main__)
    signal.signal(signal.SIGUSR1, lambda *a: None)
    signal.signal(signal.SIGUSR2, lambda *a: None)
    if sys.argv[1] == "held":
        sys.path.insert(0, sys.argv[2])
        from wrappers.hooks import children

        children.install()
    out = {}
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    hammer(p.pid)
    out["python"] = p.wait()
    p = subprocess.Popen(["sleep", "0.5"])
    hammer(p.pid)
    out["program"] = p.wait()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Process(target=time.sleep, args=(0.5,))
    q.start()
    hammer(q.pid)
    q.join()
    out["spawn"] = q.exitcode
    pid = os.fork()
    if pid == 0:  # os.exec*: this process becomes the program
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(0.5)"])
    hammer(pid)
    out["exec"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps(out))
"""


def _parent(mode: str, tmp_path) -> dict[str, int]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEIRESIAS_")}
    env.update(PYTHONPATH=str(HOOK_SITE), TEIRESIAS_CHECKPOINT="1")
    r = subprocess.run(
        [sys.executable, str(script), mode, str(REPO)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("mode", ["bare", "held"])
def test_children_of_a_handling_process_survive_usr1_at_their_start(tmp_path, mode):
    codes = _parent(mode, tmp_path)
    if mode == "bare":
        # Without children.install() every kind of child dies of the first USR1.
        assert set(codes.values()) == {-10}, codes
    else:
        assert set(codes.values()) == {0}, codes
