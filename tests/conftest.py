"""Fixtures and helpers shared by more than one test folder: the checkout's
root (REPO), polling for a state (``poll``: tests poll, they never sleep
blindly), a job script that speaks the controller's preemption protocol, and
the uninterrupted reference weights of the torch tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

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


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Final weights of tests/fixtures/train_scripts/train_plain.py run once,
    uninterrupted, without any hook: what every resumed run must equal bitwise."""
    from tests.torch.jobs import plain_env, run

    out = tmp_path_factory.mktemp("ref") / "ref.pt"
    r = run("train_plain.py", [str(out)], plain_env())
    assert r.returncode == 0, r.stderr
    return out
