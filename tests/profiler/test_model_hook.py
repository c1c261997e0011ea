"""profiler.model_hook.install() when torch is already imported (the
sitecustomize path, before torch, is exercised by test_ddp_torch.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.profiler.conftest import profiled_env, run

SCRIPT = r"""
import os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from profiler.model_hook import install
assert install() is True
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
m = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Linear(20, 2))
m[1].bias.requires_grad_(False)
DDP(m, bucket_cap_mb=5)
dist.destroy_process_group()
"""


@pytest.mark.torch
def test_install_after_torch_import_writes_parameter_sizes(tmp_path: Path) -> None:
    env = profiled_env(tmp_path)
    run([sys.executable, "-c", SCRIPT, str(tmp_path / "store")], env, timeout=120)
    data = json.loads((tmp_path / "profile" / "model-rank0.json").read_text())
    assert data["bucket_cap_mb"] == 5 and data["rank"] == 0
    # Trainable parameters only, float32 bytes.
    assert data["tensors"] == [["0.weight", 800], ["0.bias", 80], ["1.weight", 160]]


def test_install_is_a_no_op_when_not_profiling() -> None:
    code = "from profiler.model_hook import install; import sys; sys.exit(0 if install() is False else 1)"
    run([sys.executable, "-c", code], {k: v for k, v in os.environ.items() if k != "TEIRESIAS_PROFILE_DIR"})
