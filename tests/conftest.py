"""Fixtures and helpers shared by more than one test folder: the checkout's
root (REPO), polling for a state (``poll``: tests poll, they never sleep
blindly), a job script that speaks the controller's preemption protocol, and
the uninterrupted reference weights of the torch tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# A sleep job that answers the preemption signal like a tsbatch job: on USR1 it
# writes its Ack (unless ACK=0) and keeps waiting to be requeued. JOBBASE is the
# job directory base (also in the job comment), RUN_FOR its length in seconds.
PROTOCOL_JOB = r"""#!/bin/bash
jobdir="$JOBBASE/$SLURM_JOB_ID"; mkdir -p "$jobdir"
on_usr1() {
  if [ "${ACK:-1}" = 1 ]; then
    printf '{"job_id": %s, "restart_count": %s, "step": 7, "path": "%s/ckpt", "bytes": 4096, "seconds": 0.25, "time": %s}' \
      "$SLURM_JOB_ID" "${SLURM_RESTART_COUNT:-0}" "$jobdir" "$(date +%s.%N)" > "$jobdir/ack.json.tmp"
    mv "$jobdir/ack.json.tmp" "$jobdir/ack.json"
  fi
}
trap on_usr1 USR1
end=$((SECONDS + ${RUN_FOR:-600}))
while [ $SECONDS -lt $end ]; do sleep 1 & wait $!; done
"""


def poll(what: str, cond: Callable[[], Any], timeout: float = 30.0, every: float = 0.25) -> Any:
    """Call ``cond`` until it returns something truthy and return that; after
    ``timeout`` seconds fail naming ``what`` (tests poll states, never sleep blindly)."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def side_by_side(*calls: Callable[[], T]) -> list[T]:
    """Run independent jobs at the same time and return their results in order (the
    first failure is raised). A job of the torch tests is mostly a Python starting
    and importing torch, one core at a time: two side by side use the second core."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


def selected_tests(request: pytest.FixtureRequest) -> set[str]:
    """Names (with their parameters) of the tests this session runs from the
    requesting module: a module's jobs started ahead are only those of its selected tests."""
    module = request.module.__name__
    return {
        item.name
        for item in request.session.items
        if getattr(item, "module", None) is not None and item.module.__name__ == module
    }


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Path:
    """Final weights of tests/fixtures/train_scripts/train_plain.py run once per session,
    uninterrupted, without any hook: what every resumed run must equal bitwise (read
    only; five test files share it, each had its own run)."""
    from tests.torch.jobs import plain_env, run

    out = tmp_path_factory.mktemp("ref") / "ref.pt"
    r = run("train_plain.py", [str(out)], plain_env())
    assert r.returncode == 0, r.stderr
    return out
