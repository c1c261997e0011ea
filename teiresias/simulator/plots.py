"""Plots of a replay (matplotlib, Agg backend: no display needed), in the
image format the output file's suffix names (.png, .pdf, .svg, ...).

Left: JCT CDF of every policy on a log x axis (Tiresias Fig. 13).
Middle: allocated-GPU utilisation over time per policy (Tiresias Fig. 11).
Right: CDF of the apps' finish-time fairness rho (Themis Fig. 8-like; rho <= 1
is sharing incentive).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from teiresias.errors import ConfigError
from teiresias.simulator.metrics import SimulationResult


def plot_format(path: str | Path) -> str:
    """The image format named by the file's suffix, if matplotlib can write it.

    Checked before any simulation runs: ``--plot out.txt`` used to get PNG
    bytes under a name that promises text.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix in formats:
        return suffix
    found = f"unknown image format '.{suffix}'" if suffix else "no suffix to name the image format"
    raise ConfigError(
        f"--plot {path}: {found}; end the name with one of: {', '.join('.' + f for f in sorted(formats))}"
    )


def _smoothed_utilisation(res: SimulationResult, bins: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Time-average the busy-GPU step function over ``bins`` equal windows."""
    t = np.asarray(res.timeline_t, dtype=float)
    b = np.asarray(res.timeline_busy, dtype=float)
    if len(t) < 2 or res.total_gpus <= 0:
        return t, b
    end = max(r.end for r in res.records) if res.records else t[-1]
    edges = np.linspace(t[0], max(end, t[-1]), bins + 1)
    # Integral of the step function up to each edge, then differences per window.
    seg_t = np.append(t, edges[-1])
    cum = np.concatenate(([0.0], np.cumsum(b * np.diff(seg_t))))
    idx = np.clip(np.searchsorted(seg_t, edges, side="right") - 1, 0, len(b) - 1)
    at_edges = cum[idx] + b[idx] * (edges - seg_t[idx])
    util = np.diff(at_edges) / np.diff(edges) / res.total_gpus
    return (edges[:-1] + edges[1:]) / 2, util


def plot_results(fh: BinaryIO, results: Sequence[SimulationResult], title: str = "", fmt: str = "png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.5))
    for res in results:
        jct = np.sort(np.asarray([r.jct for r in res.records], dtype=float))
        if len(jct):
            y = np.arange(1, len(jct) + 1) / len(jct)
            ax1.step(np.maximum(jct, 1e-3), y, where="post", label=res.policy)
        t, u = _smoothed_utilisation(res)
        if len(t):
            ax2.plot((t - t[0]) / 3600.0, 100 * np.asarray(u), label=res.policy, linewidth=1)
        rho = np.sort(np.asarray(list(res.summary.app_rho.values()), dtype=float))
        if len(rho):
            ax3.step(
                rho, np.arange(1, len(rho) + 1) / len(rho), where="post", label=f"{res.policy} (max {rho[-1]:.2f})"
            )
    ax1.set_xscale("log")
    ax1.set_xlabel("JCT (seconds, log scale)")
    ax1.set_ylabel("fraction of jobs")
    ax1.set_title("JCT CDF")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    ax2.set_xlabel("time since first submission (hours)")
    ax2.set_ylabel("allocated GPUs (%)")
    ax2.set_ylim(0, 105)
    ax2.set_title("GPU utilisation")
    ax2.grid(True, alpha=0.3)
    ax2.legend()
    ax3.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax3.set_xlabel("finish-time fairness rho of an app")
    ax3.set_ylabel("fraction of apps")
    ax3.set_title("rho CDF (apps)")
    ax3.grid(True, alpha=0.3)
    ax3.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(fh, format=fmt, dpi=100)
    plt.close(fig)
