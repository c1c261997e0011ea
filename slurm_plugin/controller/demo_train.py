"""A tiny, unmodified PyTorch training script for `teiresias demo --jobs pytorch`.

WORK optimizer steps of about one second each: a small MLP on a fixed
random dataset, with a pause standing in for the GPU compute of a real step
(the demo's GPUs are fake). Nothing here knows about teiresias: tsbatch's
hooks checkpoint it at a step boundary when the controller preempts it and
resume it, DataLoader position included, after the requeue.
"""

import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    steps = int(os.environ.get("WORK", "10"))
    pause = float(os.environ.get("STEP_SECONDS", "1.0"))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(steps * 16, 32)
    y = x.sum(dim=1, keepdim=True)
    g = torch.Generator()
    g.manual_seed(0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=g)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for xb, yb in loader:
        t0 = time.monotonic()
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(max(pause - (time.monotonic() - t0), 0.0))
        print(f"step {opt.state[next(iter(opt.state))]['step'].item():.0f} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
