"""Resource usage sampled by the hooks (wrappers/hooks/usage.py, protocol.UsageSample).

The psutil side runs on real processes. The NVML side runs for real as far as
this machine allows: without a driver NVML is absent, and the sample must say
so (None, never a made-up figure). The figures NVML would give are checked
only in ``test_nvml_figures_from_a_double``, with a stand-in for the pynvml
module (no GPU is lent to these tests).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from tests.helpers import poll
from tests.torch.jobs import job_env, run
from wrappers import protocol
from wrappers.hooks import usage


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        return True
    except Exception:
        return False


@pytest.mark.torch
def test_a_training_run_leaves_its_usage_sample_in_the_job_dir(tmp_path):
    base = tmp_path / "jobs"
    env = job_env(
        base,
        41,
        1,
        TRAIN_EPOCHS="1",
        TRAIN_STEP_SLEEP="0.05",
        SLURMD_NODENAME="node3",
        CUDA_VISIBLE_DEVICES="0",
        SLURM_JOB_GPUS="0",
        **{protocol.ENV_USAGE_EVERY: "0.1"},
    )
    r = run("train_plain.py", [str(tmp_path / "out.pt")], env)
    assert r.returncode == 0, r.stderr
    samples = protocol.read_usage(base / "41")
    assert [s.node for s in samples] == ["node3"]
    s = samples[0]
    assert (s.job_id, s.restart_count, s.gpus) == (41, 1, 1)
    assert s.processes >= 1
    assert s.rss_bytes > 50 * 2**20  # a Python with torch imported
    assert s.cpu_percent >= 0.0
    if _nvml_works():
        assert s.gpu_util is not None and s.gpu_mem_total
    else:
        # No driver here: said, not invented.
        assert (s.gpu_util, s.gpu_mem_used, s.gpu_mem_total) == (None, None, None)
        assert s.gpu_note.startswith("NVML unavailable")


def test_usage_sampling_can_be_turned_off(tmp_path):
    jobdir = tmp_path / "7"
    jobdir.mkdir()
    assert usage.start({protocol.ENV_USAGE_EVERY: "0"}, jobdir, "7", 0) is None
    assert not list(jobdir.glob("usage.*"))


def test_one_sampler_per_node(tmp_path):
    jobdir = tmp_path / "8"
    jobdir.mkdir()
    env = {protocol.ENV_USAGE_EVERY: "30", "SLURMD_NODENAME": "n1"}
    assert usage.start(env, jobdir, "8", 0) is not None
    # A second process of the job on the node (torchrun's worker beside its agent) does not sample.
    assert usage.start(env, jobdir, "8", 0) is None
    assert usage.start({**env, "SLURMD_NODENAME": "n2"}, jobdir, "8", 0) is not None
    poll(
        "both nodes' first samples",
        lambda: sorted(s.node for s in protocol.read_usage(jobdir)) == ["n1", "n2"],
        timeout=10,
    )


def test_cpu_and_memory_of_the_whole_process_tree(tmp_path):
    # A shell with a busy child and an idle one, in a group of their own as tsbatch runs a script.
    shell = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} -c 'while True: pass' & sleep 60 & wait"], start_new_session=True
    )
    try:
        root = psutil.Process(shell.pid)

        def started() -> list[psutil.Process]:
            kids = root.children(recursive=True)
            python = [p for p in kids if "python" in p.name() or "python" in " ".join(p.cmdline())]
            return python if len(kids) == 2 else []

        busy = poll("the busy and the idle child", started, timeout=10)[0]
        s = usage.Sampler(tmp_path, 9, 0, "n1", [], root)
        # What the busy child really got, read independently around the sampler's window:
        # on a loaded machine it is far from a whole core (39% on 2 cores at load 7).
        cpu0, wall0 = sum(busy.cpu_times()[:2]), time.monotonic()
        s.sample()  # starts the CPU measurement
        time.sleep(0.5)
        first = s.sample()
        got = 100 * (sum(busy.cpu_times()[:2]) - cpu0) / (time.monotonic() - wall0)
        assert first.processes == 3
        assert got > 5.0, f"the busy child got {got:.1f}% of a core: the machine is too loaded to tell"
        # The busy child's share (one core = 100), give or take the clock ticks and the windows' edges.
        assert abs(first.cpu_percent - got) <= max(10.0, 0.25 * got), (first.cpu_percent, got)
        assert first.rss_bytes >= sum(p.memory_info().rss for p in root.children(recursive=True))
        assert first.gpu_util is None and first.gpu_note == "no GPU assigned to the job on this node"
        busy.kill()
        busy.wait(5)
        time.sleep(0.3)
        second = s.sample()
        assert second.processes == 2
        assert second.cpu_percent < min(20.0, first.cpu_percent / 2)  # bash and sleep, both waiting
    finally:
        os.killpg(shell.pid, 9)
        shell.wait(5)


def test_absent_nvml_is_said_not_raised():
    # The real pynvml on this machine: without a driver nvmlInit fails.
    if _nvml_works():
        pytest.skip("NVML works here: the absent case cannot be caused for real")
    nvml, note = usage.Nvml.open(["0"])
    assert nvml is None and note.startswith("NVML unavailable (")


def test_nvml_figures_from_a_double():
    """A stand-in for pynvml (no GPU here): the figures are the mean
    utilization and the summed memory of exactly the job's GPUs."""
    gpus = {0: (30, 1 << 30, 16 << 30), 2: (70, 3 << 30, 16 << 30), 5: (99, 9 << 30, 16 << 30)}
    uuids = {"GPU-abc": 5}
    lib = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetHandleByUUID=lambda u: uuids[u],
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=gpus[h][0]),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=gpus[h][1], total=gpus[h][2]),
    )
    nvml, note = usage.Nvml.open(["0", "2"], lib=lib)
    assert note == "" and nvml is not None
    assert nvml.read() == (50.0, 4 << 30, 32 << 30)
    nvml, _ = usage.Nvml.open(["GPU-abc"], lib=lib)
    assert nvml is not None and nvml.read() == (99.0, 9 << 30, 16 << 30)

    def broken() -> None:
        raise RuntimeError("Driver Not Loaded")

    nvml, note = usage.Nvml.open(["0"], lib=SimpleNamespace(nvmlInit=broken))
    assert nvml is None and note == "NVML unavailable (Driver Not Loaded)"


def test_the_job_gpus_come_from_slurm_first():
    assert usage.job_gpus({"SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "0,1"}) == ["1", "3"]
    assert usage.job_gpus({"CUDA_VISIBLE_DEVICES": "GPU-x,GPU-y"}) == ["GPU-x", "GPU-y"]
    assert usage.job_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == []
