"""The script's own Python values (wrappers/hooks/scriptvars.py) on real frames of
real functions, without torch: what is noted when a frame is first seen, what a
checkpoint carries (only what training changed), putting it back into a replay's
frames at the same point, and refusing when the point is reached from elsewhere.
The end-to-end cases (real scripts, real preemptions) are in
tests/torch/test_script_corpus.py: hf_max_steps.py, step_schedule.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from wrappers.hooks.scriptvars import RestoreError, ScriptVars, fix_enumerate

iter_num = 0  # a module global the loop rebinds (nanoGPT's iter_num)


@dataclass
class State:
    global_step: int = 0
    epoch: float = 0.0


@dataclass
class Trainer:
    state: State = field(default_factory=State)
    log: dict[str, Any] = field(default_factory=lambda: {"losses": []})
    world_size: int = 2


def _point(sv: ScriptVars, saved: dict | None) -> dict | int:
    """The data request where the checkpoint is taken (first run) or reached (replay)."""
    caller = sys._getframe(1)
    return sv.capture(caller) if saved is None else sv.restore(saved, caller)


def _train(sv: ScriptVars, saved: dict | None, world: int, train: bool) -> tuple[Any, ...]:
    """A loop as scripts write it; ``train=False`` is the replay (no steps before the point)."""
    global iter_num
    iter_num = 0
    trainer = Trainer(world_size=world)
    completed, best = 0, float("inf")
    pause = 0.3 if train else 0.0  # read from the environment: differs between runs, not by training
    got: Any = None
    for i in range(6):
        sv.sight(sys._getframe())  # every data request
        if i == 4:
            got = _point(sv, saved)
            break
        if train:
            trainer.state.global_step += 1
            trainer.state.epoch = i / 6
            trainer.log["losses"].append(1.0 / (i + 1))
            completed += 2
            best = min(best, 1.0 / (i + 1))
            iter_num += 1
    return got, trainer, completed, best, pause, iter_num


def _runs(world_replay: int = 2, twist: bool = False, edit: Any = None) -> tuple[dict, tuple[Any, ...]]:
    """The first run to its checkpoint, then the replay to the same point: one call
    line for both (the frames, this one included, must match), in fresh ScriptVars."""
    saved: dict | None = None
    out: tuple[Any, ...] = ()
    for run in range(2):
        call = _twisted if twist and run == 1 else _train
        out = call(ScriptVars(), saved, 2 if run == 0 else world_replay, train=run == 0)
        if run == 0:
            saved = out[0] if edit is None else edit(out[0])
    assert saved is not None
    return saved, out


def _twisted(sv: ScriptVars, saved: dict | None, world: int, train: bool) -> tuple[Any, ...]:
    """The same point reached through another function."""
    return _train(sv, saved, world, train)


def _names(saved: dict) -> set[str]:
    """What was carried from _train's frame (its locals and the module's globals)."""
    return {
        ".".join(str(n) for _, n in path)
        for index, path, _ in saved["entries"]
        if saved["frames"][index][1] == "_train" or (path[0][0] == "g" and saved["frames"][index][0] == __file__)
    }


def test_what_training_changed_is_carried_and_put_back():
    saved, (restored, trainer, completed, best, pause, it) = _runs()
    names = _names(saved)
    # Carried: what the steps changed, wherever it is kept (the loop's own i too: the
    # for statement sets it again right away).
    assert {"trainer.state.global_step", "trainer.state.epoch", "trainer.log.losses", "completed", "best"} <= names
    assert "iter_num" in names  # the module global
    # Not carried: what the run's setup or environment set (the same before and after training).
    assert not names & {"trainer.world_size", "pause", "world", "train"}
    assert restored == len(saved["entries"])
    assert (trainer.state.global_step, trainer.state.epoch, completed, best, it) == (4, 3 / 6, 8, 0.25, 4)
    assert trainer.log["losses"] == [1.0, 0.5, 1 / 3, 0.25]
    assert pause == 0.0  # the replay's own


def test_a_value_the_environment_sets_stays_the_runs_own():
    """An elastic job resumed at another size: world_size is this run's, not the checkpoint's."""
    _, (_, trainer, completed, *_) = _runs(world_replay=1)
    assert trainer.world_size == 1 and completed == 8


def test_the_point_reached_from_elsewhere_is_refused():
    with pytest.raises(RestoreError, match="the checkpoint was taken in .*this run reached it in"):
        _runs(twist=True)


def test_a_missing_place_is_refused():
    def gone(saved: dict) -> dict:
        deeper = [[i, [*path[:1], ["a", "gone"], *path[1:]], v] for i, path, v in saved["entries"]]
        return {**saved, "entries": deeper}

    with pytest.raises(RestoreError, match="does not exist at the resume point"):
        _runs(edit=gone)


def test_enumerate_counts_on_from_the_skipped_batches():
    data = iter(range(10))
    for _ in range(3):
        next(data)  # a rebuilt iterator that skipped 3 batches
    numbered = enumerate(data, start=1)
    assert fix_enumerate(data, 3)
    assert next(numbered) == (4, 3)
    assert fix_enumerate(iter([]), 5)  # nothing wraps it: nothing to do
