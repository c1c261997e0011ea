"""Gradient accumulation by the hooks (accumulate.json) trains the same model as full batches.

Real PyTorch, real hooks (the tsbatch environment), 1 process and 2-rank DDP
under torchrun (gloo). Micro-batch gradients are summed in a different order
than one full-batch backward, so weights agree within float64 tolerance,
not bit for bit. BatchNorm is the documented exception (docs/sjf-bsbf.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.torch.jobs import PYTHON, SCRIPTS, job_env, plain_env, run
from wrappers.protocol import Accumulate, job_dir, write_accumulate

pytestmark = pytest.mark.torch


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _close(a: dict, b: dict, tol: float) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=tol) for k in a)


Result = tuple[dict[str, torch.Tensor], list[int], list[str]]


def _train(tmp: Path, job_id: int, steps: int | None, ddp: bool = False, **extra: str) -> Result:
    base = tmp / "jobs"
    if steps is not None:
        jd = job_dir(base, job_id)
        jd.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_accumulate(jd, Accumulate(steps, 16 // steps))
    env = job_env(base, job_id, **extra) if extra.pop("PLAIN", "") != "1" else plain_env(**extra)
    out = tmp / "out.pt"
    if ddp:
        r = subprocess.run(
            [
                PYTHON,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                str(SCRIPTS / "train_accumulate.py"),
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    else:
        r = run("train_accumulate.py", [str(out)], env, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    sizes = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("batch ")]
    lrs = [line for line in r.stdout.splitlines() if line.startswith("lr ")]
    return _weights(out), sizes, lrs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[Callable[..., list[Result]]]:
    """Training runs by their settings, each made once per module (the full-batch run
    serves three tests) and a test's runs side by side: each is mostly Python starting
    and importing torch, which leaves the other core idle."""
    pool = ThreadPoolExecutor(max_workers=2)
    made: dict[tuple[Any, ...], Future[Result]] = {}

    def get(*wanted: tuple[int | None, bool, dict[str, str]]) -> list[Result]:
        for steps, ddp, extra in wanted:
            key = (steps, ddp, tuple(sorted(extra.items())))
            if key not in made:
                job = 61 + len(made)
                made[key] = pool.submit(_train, tmp_path_factory.mktemp("run"), job, steps, ddp, **extra)
        return [made[(s, d, tuple(sorted(e.items())))].result(timeout=500) for s, d, e in wanted]

    yield get
    pool.shutdown(wait=True, cancel_futures=True)


FULL = (None, False, {})


def test_hooks_without_accumulate_json_change_nothing(runs) -> None:
    (plain, _, _), (hooked, sizes, _) = runs((None, False, {"PLAIN": "1"}), FULL)
    assert set(sizes) == {16}
    assert all(torch.equal(plain[k], hooked[k]) for k in plain)


@pytest.mark.parametrize("steps", [2, 4])
def test_one_process_accumulation_equals_full_batches(runs, steps) -> None:
    (full, full_sizes, full_lrs), (acc, sizes, lrs) = runs(FULL, (steps, False, {}))
    # The loop really saw micro-batches, s per full batch, and the schedulers counted full batches.
    assert set(sizes) == {16 // steps} and len(sizes) == steps * len(full_sizes)
    assert lrs == full_lrs
    assert _close(full, acc, 1e-10)
    # And it is not trivially close: training moved the weights far from each other's scale.
    init = torch.nn.Linear(8, 32)
    assert not torch.allclose(full["0.weight"].float(), init.weight, atol=1e-2)


def test_ddp_two_ranks_accumulation_equals_full_batches(runs) -> None:
    (full, full_sizes, _), (acc, sizes, _) = runs((None, True, {}), (4, True, {}))
    assert set(full_sizes) == {16} and set(sizes) == {4} and len(sizes) == 4 * len(full_sizes)
    assert _close(full, acc, 1e-10)


def test_batchnorm_is_the_known_exception(runs) -> None:
    """BatchNorm normalizes each micro-batch with its own statistics: not the same model."""
    (full, _, _), (acc, sizes, _) = runs((None, False, {"TRAIN_BN": "1"}), (4, False, {"TRAIN_BN": "1"}))
    assert set(sizes) == {4}
    assert not _close(full, acc, 1e-6)
