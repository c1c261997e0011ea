"""The saved state, in process: every common optimizer/scheduler/scaler state
survives a write and a weights_only load, and is restored into fresh objects."""

from __future__ import annotations

import random
import weakref

import numpy as np
import pytest
import torch
from torch import nn

from wrappers.hooks import state as st
from wrappers.hooks.checkpoint import FORMAT, CheckpointStore

pytestmark = pytest.mark.torch


def _build(tracked: st.Tracked, sched_kind: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    frozen = nn.Linear(2, 2)  # not in the optimizer: not a model
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = {
        "onecycle": lambda: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=50),
        "plateau": lambda: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0),
        "sequential": lambda: torch.optim.lr_scheduler.SequentialLR(
            opt, [torch.optim.lr_scheduler.LinearLR(opt), torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)], [3]
        ),
    }[sched_kind]()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for m in (*model.modules(), frozen):
        tracked.modules.add(m)
    tracked.optimizers.append(weakref.ref(opt))
    for s in (sched, *getattr(sched, "_schedulers", [])):
        tracked.schedulers.append(weakref.ref(s))
    tracked.scalers.append(weakref.ref(scaler))
    return model, frozen, opt, sched, scaler


@pytest.mark.parametrize("sched_kind", ["onecycle", "plateau", "sequential"])
def test_state_round_trip_weights_only(tmp_path, sched_kind):
    t1 = st.Tracked()
    model, frozen, opt, sched, scaler = _build(t1, sched_kind)
    assert t1.models() == [model]
    for _ in range(5):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step(loss.item()) if sched_kind == "plateau" else sched.step()
    random.random(), np.random.rand()
    local = {
        "rng": st.capture_rng(),
        "iterators": [],
        "loader_gens": [],
        "point": {"kind": "none", "ord": -1, "n": -1, "pos": -1},
    }
    payload = {
        "format": FORMAT,
        "step": 5,
        "world_size": 1,
        "optimizer_steps": [5],
        "shared": st.capture_shared(t1),
        "ranks": [local],
    }
    store = CheckpointStore(tmp_path / "job")
    store.prepare()
    written = store.write(payload, step=5)
    data = store.load(written.path)  # integrity, weights_only=True and structure checks inside

    want_py, want_np, want_t = random.random(), np.random.rand(), torch.rand(3)
    t2 = st.Tracked()
    model2, _, opt2, sched2, scaler2 = _build(t2, sched_kind)
    st.restore_shared(t2, data["shared"])
    st.restore_rng(data["ranks"][0]["rng"])
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert sched2.state_dict().keys() == sched.state_dict().keys()
    assert scaler2.state_dict() == scaler.state_dict()
    assert (random.random(), np.random.rand()) == (want_py, want_np) and torch.equal(torch.rand(3), want_t)


def test_restore_refuses_a_different_model(tmp_path):
    t1 = st.Tracked()
    kept = _build(t1, "onecycle")  # tracked weakly: keep them alive
    shared = st.capture_shared(t1)
    assert len(shared["models"]) == 1 and kept
    t2 = st.Tracked()
    other = nn.Linear(4, 1)
    t2.modules.add(other)
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    t2.optimizers.append(weakref.ref(opt))
    with pytest.raises(st.StateMismatch, match="does not match"):
        st.restore_shared(t2, shared)
