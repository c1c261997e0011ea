"""Gradient accumulation by the hooks (accumulate.json) trains the same model as full batches.

Real PyTorch, real hooks (the tsbatch environment), 1 process and 2-rank DDP
under torchrun (gloo). Micro-batch gradients are summed in a different order
than one full-batch backward, so weights agree within float64 tolerance,
not bit for bit. BatchNorm is the documented exception (docs/sjf-bsbf.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.torch.jobs import PYTHON, SCRIPTS, job_env, plain_env, run
from wrappers.protocol import Accumulate, job_dir, write_accumulate

pytestmark = pytest.mark.torch


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _close(a: dict, b: dict, tol: float) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=tol) for k in a)


def _train(tmp: Path, name: str, job_id: int, steps: int | None, ddp: bool = False, **extra: str):
    base = tmp / "jobs"
    if steps is not None:
        jd = job_dir(base, job_id)
        jd.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_accumulate(jd, Accumulate(steps, 16 // steps))
    env = job_env(base, job_id, **extra)
    out = tmp / f"{name}.pt"
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


def test_hooks_without_accumulate_json_change_nothing(tmp_path) -> None:
    out = tmp_path / "plain.pt"
    r = run("train_accumulate.py", [str(out)], plain_env(), timeout=180)
    assert r.returncode == 0, r.stderr
    hooked, sizes, _ = _train(tmp_path, "hooked", 61, None)
    assert set(sizes) == {16}
    plain = _weights(out)
    assert all(torch.equal(plain[k], hooked[k]) for k in plain)


@pytest.mark.parametrize("steps", [2, 4])
def test_one_process_accumulation_equals_full_batches(tmp_path, steps) -> None:
    full, full_sizes, full_lrs = _train(tmp_path, "full", 62, None)
    acc, sizes, lrs = _train(tmp_path, "acc", 63, steps)
    # The loop really saw micro-batches, s per full batch, and the schedulers counted full batches.
    assert set(sizes) == {16 // steps} and len(sizes) == steps * len(full_sizes)
    assert lrs == full_lrs
    assert _close(full, acc, 1e-10)
    # And it is not trivially close: training moved the weights far from each other's scale.
    init = torch.nn.Linear(8, 32)
    assert not torch.allclose(full["0.weight"].float(), init.weight, atol=1e-2)


def test_ddp_two_ranks_accumulation_equals_full_batches(tmp_path) -> None:
    full, full_sizes, _ = _train(tmp_path, "full", 64, None, ddp=True)
    acc, sizes, _ = _train(tmp_path, "acc", 65, 4, ddp=True)
    assert set(full_sizes) == {16} and set(sizes) == {4} and len(sizes) == 4 * len(full_sizes)
    assert _close(full, acc, 1e-10)


def test_batchnorm_is_the_known_exception(tmp_path) -> None:
    """BatchNorm normalizes each micro-batch with its own statistics: not the same model."""
    full, _, _ = _train(tmp_path, "full", 66, None, TRAIN_BN="1")
    acc, sizes, _ = _train(tmp_path, "acc", 67, 4, TRAIN_BN="1")
    assert set(sizes) == {4}
    assert not _close(full, acc, 1e-6)
