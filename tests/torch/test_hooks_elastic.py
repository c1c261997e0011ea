"""Elastic jobs (tsbatch --elastic MIN-MAX, Gandiva §3.3 grow-shrink): a job
checkpointed and restarted at another size trains as the fixed-size run.

Real PyTorch, real hooks, torchrun with gloo on CPU, real signals: a job of
elastic 1-2 runs at 2 ranks, is preempted, resumes at 1 rank (the hooks group
2 loader batches per optimizer step), is preempted again and finishes at 2
ranks. Its loss over the whole data set after every optimizer step, and its
final weights, match the uninterrupted 2-rank run within float tolerance
(the 1-rank steps sum the same gradients in another order).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.torch.jobs import PYTHON, SCRIPTS, job_env, last_step, poll, read_ack, signal_tree
from wrappers.protocol import job_dir

pytestmark = pytest.mark.torch

STEPS = 3 * 256 // 32  # 3 epochs of 256 samples, a global batch of 32


def _torchrun(ranks: int, out: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(
            [
                PYTHON,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={ranks}",
                str(SCRIPTS / "train_elastic.py"),
                str(out),
            ],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )


def _trajectory(*logs: Path) -> dict[int, float]:
    out: dict[int, float] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith("step "):
                _, k, _, loss = line.split()
                out[int(k)] = float(loss)
    return out


def _preempt_at(proc: subprocess.Popen, log: Path, jobdir: Path, step: int) -> int:
    poll(f"step {step}", lambda: last_step(log) >= step, timeout=120)
    (jobdir / "ack.json").unlink(missing_ok=True)
    signal_tree(proc.pid, signal.SIGUSR1)
    ack = poll("the Ack", lambda: read_ack(jobdir), timeout=60)
    signal_tree(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    return int(ack["step"])  # type: ignore[index]


def test_two_ranks_to_one_and_back_match_the_fixed_two_rank_run(tmp_path) -> None:
    base = tmp_path / "jobs"
    fixed_log, fixed_out = tmp_path / "fixed.log", tmp_path / "fixed.pt"
    p = _torchrun(2, fixed_out, job_env(base, 91, TEIRESIAS_ELASTIC="1-2"), fixed_log)
    assert p.wait(timeout=300) == 0, fixed_log.read_text()[-3000:]
    fixed = _trajectory(fixed_log)
    assert sorted(fixed) == list(range(1, STEPS + 1))

    jobdir = job_dir(base, 92)
    out = tmp_path / "elastic.pt"
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    pause = {"TRAIN_STEP_SLEEP": "0.05", "TEIRESIAS_ELASTIC": "1-2"}
    first = _preempt_at(_torchrun(2, out, job_env(base, 92, **pause), logs[0]), logs[0], jobdir, 5)
    second = _preempt_at(_torchrun(1, out, job_env(base, 92, restart=1, **pause), logs[1]), logs[1], jobdir, first + 4)
    last = _torchrun(2, out, job_env(base, 92, restart=2, **pause), logs[2])
    assert last.wait(timeout=300) == 0, logs[2].read_text()[-3000:]
    assert first < second < STEPS

    # The 1-rank run really grouped: two loader batches (two lines) per optimizer step.
    one_rank = [int(line.split()[1]) for line in logs[1].read_text().splitlines() if line.startswith("step ")]
    assert len(one_rank) >= 2 * (second - first) and one_rank.count(first + 1) == 2
    assert "resuming a checkpoint of 2 rank(s) at 1" in logs[1].read_text()
    assert "resuming a checkpoint of 1 rank(s) at 2" in logs[2].read_text()

    elastic = _trajectory(*logs)
    assert sorted(elastic) == list(range(1, STEPS + 1))
    for k in fixed:
        assert elastic[k] == pytest.approx(fixed[k], rel=1e-9, abs=1e-12), f"loss after step {k}"
    a, b = torch.load(fixed_out, weights_only=True), torch.load(out, weights_only=True)
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=1e-10) for k in a)
    # Training moved: the trajectory is no flat line that any run would match.
    assert fixed[STEPS] < 0.5 * fixed[1]


def test_resized_at_an_epochs_end_matches_the_fixed_two_rank_run(tmp_path) -> None:
    """Shrunk right at the end of an epoch (step 8 of 8 per epoch): the checkpoint's data
    position is the exhausted iterator's, and the resumed run must begin the next epoch
    with the same learning-rate schedule and sampler epoch as the fixed-size run."""
    base = tmp_path / "jobs"
    fixed_log, fixed_out = tmp_path / "fixed.log", tmp_path / "fixed.pt"
    p = _torchrun(2, fixed_out, job_env(base, 93, TEIRESIAS_ELASTIC="1-2"), fixed_log)
    assert p.wait(timeout=300) == 0, fixed_log.read_text()[-3000:]
    fixed = _trajectory(fixed_log)

    jobdir = job_dir(base, 94)
    out = tmp_path / "elastic.pt"
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    # Each step sleeps after printing: the signal lands in step 7's sleep, and the hooks
    # stop after the next optimizer step, step 8, the epoch's last.
    pause = {"TRAIN_STEP_SLEEP": "1.0", "TEIRESIAS_ELASTIC": "1-2"}
    first = _preempt_at(_torchrun(2, out, job_env(base, 94, **pause), logs[0]), logs[0], jobdir, 7)
    assert first == 8, f"checkpoint at step {first}, not at the epoch's end"
    last = _torchrun(1, out, job_env(base, 94, restart=1, TEIRESIAS_ELASTIC="1-2"), logs[1])
    assert last.wait(timeout=300) == 0, logs[1].read_text()[-3000:]
    elastic = _trajectory(*logs)
    assert sorted(elastic) == list(range(1, STEPS + 1))
    for k in fixed:
        assert elastic[k] == pytest.approx(fixed[k], rel=1e-9, abs=1e-12), f"loss after step {k}"


def test_a_data_set_no_multiple_of_the_batch_takes_the_same_steps(tmp_path) -> None:
    """216 samples, a job batch of 32 (issue 23 item 4): each epoch ends with a short
    step of 24 samples (12 per rank at 2 ranks; at 1 rank one batch of 16 and one of 8,
    weighed by their samples). At 1 rank the short group used to be dropped (fewer
    optimizer steps, different updates from the next epoch on); here the job runs at 2
    ranks, is preempted, resumes at 1 rank, is preempted at an epoch's end (its data
    position, the end of a 14-batch epoch, becomes the end of a 7-batch one) and ends
    at 2 ranks: the same 21 steps and losses as the fixed 2-rank run."""
    base = tmp_path / "jobs"
    steps = 3 * 7
    env = {"TEIRESIAS_ELASTIC": "1-2", "TRAIN_SAMPLES": "216"}
    fixed_log, fixed_out = tmp_path / "fixed.log", tmp_path / "fixed.pt"
    p = _torchrun(2, fixed_out, job_env(base, 95, **env), fixed_log)
    assert p.wait(timeout=300) == 0, fixed_log.read_text()[-3000:]
    fixed = _trajectory(fixed_log)
    assert sorted(fixed) == list(range(1, steps + 1))

    jobdir = job_dir(base, 96)
    out = tmp_path / "elastic.pt"
    logs = [tmp_path / f"run{i}.log" for i in range(3)]
    first = _preempt_at(
        _torchrun(2, out, job_env(base, 96, TRAIN_STEP_SLEEP="0.05", **env), logs[0]), logs[0], jobdir, 3
    )
    # At 1 rank two loader lines per step; the signal during step 13's batches stops after step 14.
    slow = {"TRAIN_STEP_SLEEP": "0.5", **env}
    second = _preempt_at(_torchrun(1, out, job_env(base, 96, restart=1, **slow), logs[1]), logs[1], jobdir, 13)
    assert second == 14, f"checkpoint at step {second}, not at the second epoch's end"
    last = _torchrun(2, out, job_env(base, 96, restart=2, **env), logs[2])
    assert last.wait(timeout=300) == 0, logs[2].read_text()[-3000:]
    assert first < second
    elastic = _trajectory(*logs)
    assert sorted(elastic) == list(range(1, steps + 1))
    for k in fixed:
        assert elastic[k] == pytest.approx(fixed[k], rel=1e-9, abs=1e-12), f"loss after step {k}"


def test_a_data_set_that_pads_differently_at_another_size_is_refused() -> None:
    """201 samples: a DistributedSampler pads them to 202 at 2 ranks, not at 1; no
    accumulation makes those the same epochs, so the first epoch is refused."""
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from wrappers.hooks.accumulate import elastic_mismatch

    def loader(n: int) -> DataLoader:
        data = TensorDataset(torch.zeros(n, 1))
        return DataLoader(data, batch_size=16, sampler=DistributedSampler(data, num_replicas=2, rank=0))

    env = {"TEIRESIAS_ELASTIC": "1-2"}
    why = elastic_mismatch(loader(201), env)
    assert why is not None and "202 samples at 2 ranks but 201 at 1" in why
    assert elastic_mismatch(loader(216), env) is None
