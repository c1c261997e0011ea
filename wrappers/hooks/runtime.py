"""The in-job half of checkpoint/resume: signals in, checkpoints out.

Installed when the script imports torch (see ``wrappers.hooks.activate``).

Stop protocol (wrappers/protocol.py, Gandiva §5.2 "suspend at the mini-batch
boundary"):

1. A signal only sets a flag: PREEMPT_SIGNAL (USR1, the controller),
   TIMELIMIT_SIGNAL (USR2, Slurm shortly before the time limit), SIGTERM
   (Slurm is about to kill the job).
2. After every ``optimizer.step()`` (a global post-step hook) the flag is
   read; with several ranks they agree on it with an all-reduce MAX on a
   gloo group of their own, so every rank stops after the same step.
3. The save happens at the next DataLoader ``next()``/``iter()`` after that
   step: the point where the script asks for the next batch, whose position
   we can name and find again. Rank 0 writes; all ranks' RNG and iterator
   positions go into the file.
4. Then: PREEMPT -> write the Ack and wait to be requeued; TIMELIMIT ->
   ``scontrol requeue`` ourselves and exit; SIGTERM -> exit.

Resume: when the job directory holds a checkpoint, the script starts from
its beginning in *replay* mode: epochs that were complete come out empty,
the interrupted epoch's iterator is rebuilt at its position, and at the very
``next()`` call where the checkpoint was taken every state is loaded, before
the batch is fetched. Replay ends there; from then on the run is the same
computation as the uninterrupted one.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable, NoReturn

import torch

from wrappers import protocol
from wrappers.hooks import state as st
from wrappers.hooks import usage
from wrappers.hooks.checkpoint import (
    FORMAT,
    CheckpointDirUnusable,
    CheckpointInvalid,
    CheckpointRefused,
    CheckpointStore,
    Written,
)
from wrappers.hooks.positions import Consumed, IterRecord, Positions, generators_of
from wrappers.hooks.suspend import Suspender


class Stop(IntEnum):
    """Why a checkpoint is taken; with several ranks the largest wins."""

    NONE = 0
    PERIODIC = 1
    API = 2
    PREEMPT = 3
    TIMELIMIT = 4
    TERM = 5


_SIGNAL_STOP = {
    getattr(signal, "SIG" + protocol.PREEMPT_SIGNAL): Stop.PREEMPT,
    getattr(signal, "SIG" + protocol.TIMELIMIT_SIGNAL): Stop.TIMELIMIT,
    signal.SIGTERM: Stop.TERM,
}


# Iteration time (protocol.RunRecord): the first steps of a run (allocator and
# cache warm-up, DDP bucket rebuild) are left out; the last intervals are kept;
# rank 0 appends the run's figure at most this often, plus at checkpoints and exit.
WARMUP_STEPS = 3
STEP_WINDOW = 2048
RUN_WRITE_EVERY_S = 60.0


class ResumeError(Exception):
    """The checkpoint could not be matched to this run of the script."""


def _say(msg: str) -> None:
    print(f"teiresias: {msg}", file=sys.stderr, flush=True)


class Runtime:
    """One per process. All methods run on the main thread (signal handlers
    only set ``signal_stop``)."""

    def __init__(self, env: os._Environ[str] | dict[str, str]) -> None:
        self.env = env
        self.job_id = env.get("SLURM_JOB_ID", "")
        self.restart_count = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
        self.every = int(env.get(protocol.ENV_EVERY, "0") or 0)
        base = env.get(protocol.ENV_BASE, protocol.DEFAULT_BASE)
        self.jobdir: Path = protocol.job_dir(base, self.job_id or "nojob")
        self.store = CheckpointStore(self.jobdir, keep=int(env.get(protocol.ENV_KEEP, "2") or 2))
        self.enabled = True
        self.tracked = st.Tracked()
        self.positions = Positions()
        self.signal_stop = Stop.NONE
        self.pending = Stop.NONE  # agreed at a step boundary, saved at the next data request
        self.waiting = False  # Ack written, waiting to be requeued
        self.api_request = False  # api.checkpoint_now()
        self.step = 0
        self.loaded = False
        self.ckpt: dict[str, Any] | None = None  # while replaying
        self.ckpt_path: Path | None = None
        self.resumed_from: int | None = None
        self._group: Any = None  # gloo group for the stop agreement
        self._dir_checked = False
        self._step_s: deque[float] = deque(maxlen=STEP_WINDOW)
        self._step_t: float | None = None  # perf_counter at the last optimizer step
        self._warmup = WARMUP_STEPS
        self._steps_timed = 0
        self._run_written = time.perf_counter()
        self.suspender = Suspender(self.jobdir, self.job_id, self.restart_count)

    # ------------------------------------------------------------------ ranks
    @staticmethod
    def _dist() -> Any:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed
        return None

    def rank(self) -> int:
        d = self._dist()
        if d:
            return d.get_rank()
        # Before init_process_group: torchrun sets RANK, srun SLURM_PROCID.
        return int(self.env.get("RANK") or self.env.get("SLURM_PROCID") or 0)

    def world(self) -> int:
        d = self._dist()
        return d.get_world_size() if d else 1

    def group(self) -> Any:
        if self._group is None:
            # Every rank gets here at the same step boundary, so new_group is collective-safe.
            self._group = torch.distributed.new_group(backend="gloo")
        return self._group

    # ------------------------------------------------------------------ signals
    def install_signals(self) -> None:
        atexit.register(self.write_run)  # a run that ends normally reports its iteration time
        sys.excepthook = _quiet_launcher_signal(sys.excepthook)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _SIGNAL_STOP:
            signal.signal(signum, self._on_signal)
        # Time-slicing (scontrol suspend): park at the next step boundary. A process
        # that trains nothing (torchrun's agent) or waits to be requeued stops at once.
        self.suspender.install(lambda: bool(self.tracked.live_optimizers()) and not self.waiting)

    def _on_signal(self, signum: int, frame: Any) -> None:
        stop = _SIGNAL_STOP[signum]
        if self.waiting:
            # Checkpoint and Ack are done: a requeue (SIGTERM) just ends us; a time
            # limit while we wait means nobody requeued us, so we do it ourselves.
            if stop == Stop.TIMELIMIT:
                self._requeue_self()
            if stop in (Stop.TERM, Stop.TIMELIMIT):
                _exit(0)
            return
        if stop == Stop.TERM and not self.tracked.live_optimizers():
            # Nothing to save (not training yet): die as without teiresias.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.signal_stop = max(self.signal_stop, stop)

    # ------------------------------------------------------------------ checkpoint dir
    def usable(self) -> bool:
        """Check the job directory once; an unusable one disables checkpoints with one warning."""
        if not self._dir_checked:
            self._dir_checked = True
            if not self.job_id:
                self.enabled = False
                return False
            try:
                self.store.prepare()
            except CheckpointDirUnusable as exc:
                self.enabled = False
                if self.rank() == 0:
                    _say(f"warning: checkpoints disabled, the job runs without them: {exc} "
                         f"(choose another directory with tsbatch --checkpoint-dir)")
            else:
                # GPU/CPU usage for the controller (wrappers/hooks/usage.py); one sampler per node.
                usage.start(self.env, self.jobdir, self.job_id, self.restart_count)
        return self.enabled

    # ------------------------------------------------------------------ resume
    def ensure_loaded(self) -> None:
        """On the first data request or step: find this job's checkpoint and enter replay."""
        if self.loaded:
            return
        self.loaded = True
        if not self.usable():
            return
        self._note_run_started()
        found = self._newest_valid()
        if found is None:
            return
        data, path = found
        data = self._resized(data)
        local = self._local_part(data)
        if local["point"]["kind"] == "none":
            _say(f"warning: {path.name} has no data position (the script uses no DataLoader "
                 f"or api.steps): this run starts from the beginning")
            return
        self.ckpt, self.ckpt_path = data, path

    def _note_run_started(self) -> None:
        """Tell the batch shell this run is about to use its state, then honour a
        preemption it was asked for before our signal handlers existed.

        The order matters (docs/checkpointing.md, "A preemption before the hooks
        are ready"): the shell records the request, then looks for our marker.
        Either it sees none and acks "nothing new" itself, or we made the marker
        first; then either our handler got its forwarded USR1 or the request was
        recorded before we look for it here."""
        try:
            protocol.mark_run_started(self.jobdir, self.restart_count, os.getpid())
        except OSError as exc:
            _say(f"warning: cannot mark this run as started in {self.jobdir}: {exc.strerror or exc}")
        if protocol.preempt_requested(self.jobdir, self.restart_count):
            self.signal_stop = max(self.signal_stop, Stop.PREEMPT)

    def _newest_valid(self) -> tuple[dict[str, Any], Path] | None:
        """The newest checkpoint that loads and is whole. Damaged newer ones
        (corrupt, truncated, hollow) are set aside with one line each; a
        checkpoint that must not be loaded (foreign, open to writers, unknown
        globals) stops the job with exit 2, as does having only damaged ones,
        unless TEIRESIAS_START_FRESH=1."""
        trust = self.env.get(protocol.ENV_TRUST, "")
        fresh = self.env.get(protocol.ENV_START_FRESH) == "1"
        damaged: list[tuple[Path, CheckpointInvalid]] = []
        for _, _, path in reversed(self.store.list()):
            try:
                data = self.store.load(path, trust=trust)
            except CheckpointInvalid as exc:
                damaged.append((path, exc))
                continue
            except CheckpointRefused as exc:
                if fresh:
                    self._set_aside([(path, exc), *damaged], "starting fresh")
                    return None
                self._fail(str(exc))
            self._set_aside(damaged, f"resuming from {path.name} (step {data['step']})")
            return data, path
        if not damaged:
            return None
        if fresh:
            self._set_aside(damaged, "starting fresh")
            return None
        older = f" (and {len(damaged) - 1} older checkpoint(s) are damaged too)" if len(damaged) > 1 else ""
        self._fail(f"no valid checkpoint: {damaged[0][1]}{older}")

    def _set_aside(self, refused: list[tuple[Path, CheckpointRefused]], then: str) -> None:
        """Rank 0 renames the refused files (every rank reaches the same verdict on the same files)."""
        if self.rank() != 0:
            return
        for path, exc in refused:
            try:
                moved = self.store.set_aside(path).name
            except FileNotFoundError:
                moved = "(already gone)"
            _say(f"warning: {exc}; set aside as {moved}, {then}")

    def _fail(self, reason: str) -> NoReturn:
        _say(f"error: {reason}. Nothing was loaded. Remove the file, or set "
             f"{protocol.ENV_START_FRESH}=1 to start this job from scratch.")
        raise SystemExit(2)

    def _resized(self, data: dict[str, Any]) -> dict[str, Any]:
        """An elastic job resumed at another size (Gandiva §3.3): each rank takes
        the saved rank's RNG state (new ranks rank 0's) and a data position of
        ``pos x old / new`` loader batches: at w ranks a step takes MAX/w batches
        per rank (wrappers/hooks/accumulate.py), so the same steps are done."""
        old = len(data["ranks"])
        d = self._dist()
        new = d.get_world_size() if d else int(self.env.get("WORLD_SIZE") or 1)
        if old == new or not self.env.get(protocol.ENV_ELASTIC):
            return data

        def scaled(part: dict[str, Any]) -> dict[str, Any]:
            out = dict(part)
            out["point"] = dict(part["point"])
            out["iterators"] = [dict(it) for it in part["iterators"]]
            for item in [out["point"], *out["iterators"]]:
                if item.get("pos", -1) > 0:
                    if item["pos"] * old % new:
                        raise ResumeError(f"cannot resume at {new} rank(s): the checkpoint's data position "
                                          f"{item['pos']} at {old} rank(s) falls inside an optimizer step")
                    item["pos"] = item["pos"] * old // new
            return out

        if self.rank() == 0:
            _say(f"elastic: resuming a checkpoint of {old} rank(s) at {new}")
        return {**data, "ranks": [scaled(data["ranks"][r] if r < old else data["ranks"][0]) for r in range(new)]}

    def _local_part(self, data: dict[str, Any]) -> dict[str, Any]:
        ranks = data["ranks"]
        r = self.rank()
        if len(ranks) != self.world() and r == 0:
            _say(f"warning: checkpoint was written by {len(ranks)} rank(s), this run has {self.world()}")
        return ranks[r] if r < len(ranks) else ranks[0]

    @property
    def replaying(self) -> bool:
        return self.ckpt is not None

    def _saved_live(self, ord_: int, n: int) -> dict[str, Any] | None:
        assert self.ckpt is not None
        for it in self._local_part(self.ckpt)["iterators"]:
            if it["ord"] == ord_ and it["n"] == n:
                return it
        return None

    def _is_point(self, kind: str, ord_: int, n: int, pos: int) -> bool:
        assert self.ckpt is not None
        p = self._local_part(self.ckpt)["point"]
        return p["kind"] == kind and p["ord"] == ord_ and p["n"] == n and p["pos"] == pos

    def restore(self) -> None:
        """Load every state at the point where the checkpoint was taken; replay ends."""
        assert self.ckpt is not None and self.ckpt_path is not None
        data, path = self.ckpt, self.ckpt_path
        self.ckpt = None
        local = self._local_part(data)
        try:
            st.restore_shared(self.tracked, data["shared"])
        except (st.StateMismatch, RuntimeError, KeyError, ValueError) as exc:
            raise ResumeError(f"cannot resume from {path}: {exc}") from exc
        st.restore_rng(local["rng"])
        self.positions.restore_generator_states(local["loader_gens"])
        for opt, n in zip(self.tracked.live_optimizers(), data["optimizer_steps"]):
            opt._teiresias_steps = n  # type: ignore[attr-defined]
        self.step = data["step"]
        self.resumed_from = data["step"]
        if self.rank() == 0:
            _say(f"resumed from {path.name} at step {self.step}")

    # ------------------------------------------------------------------ hooks
    def on_iter(self, owner: Any, kind: str, make: Callable[[int, Any], Any]) -> tuple[Any, IterRecord | None]:
        """``iter(loader)``: name the iteration; in replay, rebuild it where it was.
        ``make(skip, at_start)`` builds the real iterator past ``skip`` items,
        calling ``at_start()`` (if not None) just before its sampler starts."""
        self.ensure_loaded()
        if not self.enabled:
            return make(0, None), None
        ord_, n = self.positions.peek(owner)
        if self.pending:
            self._save_and_act({"kind": "iter", "ord": ord_, "n": n, "pos": 0})
        skip, at_start = 0, None
        if self.replaying:
            saved = self._saved_live(ord_, n)
            if self._is_point("iter", ord_, n, 0):
                self.restore()
                first = self.positions.first.get(ord_)
                if _persistent(owner, n) and first is not None:
                    # As below: creation draws as at epoch 0, the sampler as at epoch n.
                    saved = {"gens": [g.get_state() for g in generators_of(owner)], "rng": torch.get_rng_state()}
                    _set_states(owner, *first)
                    at_start = lambda: _set_states(owner, saved["gens"], saved["rng"])  # noqa: E731
            elif saved is not None:
                # Put back the generator states the original run had when it made this
                # iterator, so it draws the same base seed and the same permutation.
                skip = saved["pos"]
                self.positions.first.setdefault(ord_, (saved["first_gens"], saved["first_rng"]))
                if _persistent(owner, n):
                    # The original made this iterator at epoch 0 and only reset it since.
                    _set_states(owner, saved["first_gens"], saved["first_rng"])
                    at_start = lambda: _set_states(owner, saved["gens"], saved["rng"])  # noqa: E731
                else:
                    _set_states(owner, saved["gens"], saved["rng"])
            else:
                self.positions.finished(self.positions.start(owner, kind))
                return Consumed(), None
        rec = self.positions.start(owner, kind)
        if at_start is not None:
            rec.gens, rec.rng = saved["gens"], saved["rng"]
        it = make(skip, at_start)
        rec.pos = skip
        return it, rec

    def on_next(self, rec: IterRecord) -> bool:
        """Before ``next(iterator)`` hands out an item; False: end this iteration now.

        Before the resume point no data may flow (it would be trained on): an
        iterator asked for an item then ends, e.g. one the original run left
        early with ``break``. An iterator rebuilt at its position is consumed
        only after the resume point, as in the original run."""
        if self.pending:
            self._save_and_act({"kind": "next", "ord": rec.ord, "n": rec.n, "pos": rec.pos})
        if self.replaying:
            if not self._is_point("next", rec.ord, rec.n, rec.pos):
                self.positions.finished(rec)
                return False
            self.restore()
        return True

    def on_step(self, optimizer: Any) -> None:
        """After every ``optimizer.step()``: count, and decide (with all ranks) whether to stop."""
        n = getattr(optimizer, "_teiresias_steps", 0) + 1
        optimizer._teiresias_steps = n
        new_step = n > self.step
        self.step = max(self.step, n)
        self.ensure_loaded()
        if self.replaying:
            raise ResumeError(
                "an optimizer step ran before the resume point was reached: this script does not "
                "replay deterministically up to its checkpoint (see docs/checkpointing.md)")
        if not self.enabled:
            if self.suspender.requested:
                self._park()
            return
        if new_step:  # several optimizers stepping together make one iteration
            self._time_step()
        stop = self.signal_stop
        if self.every and self.step % self.every == 0:
            stop = max(stop, Stop.PERIODIC)
        if self.api_request:
            self.api_request = False
            stop = max(stop, Stop.API)
        suspend = self.suspender.requested
        if self.world() > 1:
            # One all-reduce for both: every rank parks (and stops) after the same step.
            t = torch.tensor([int(stop), int(suspend)], dtype=torch.int64)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=self.group())
            stop, suspend = Stop(int(t[0].item())), bool(t[1].item())
        if suspend:
            self._park()
        if stop:
            self.pending = stop
            if not self.positions.live:
                # No data position to wait for: save here (resume will start over).
                self._save_and_act({"kind": "none", "ord": -1, "n": -1, "pos": -1})

    def _park(self) -> None:
        """Suspended by Slurm (SIGTSTP): offload, stop until SIGCONT, reload (wrappers/hooks/suspend.py).
        The step clock restarts, so the stopped time is not taken for a slow step."""
        self.suspender.park(self.step, self.tracked.models(), self.tracked.live_optimizers(), self.rank())
        self._step_t = None

    # ------------------------------------------------------------------ iteration time
    def _time_step(self) -> None:
        """A few float ops per step; the file is written at most every RUN_WRITE_EVERY_S."""
        t = time.perf_counter()
        if self._step_t is not None:
            if self._warmup > 0:
                self._warmup -= 1
            else:
                self._step_s.append(t - self._step_t)
                self._steps_timed += 1
        self._step_t = t
        if self._steps_timed and t - self._run_written >= RUN_WRITE_EVERY_S:
            self.write_run()

    def write_run(self) -> None:
        """Rank 0 appends this run's median iteration time to runs.jsonl (protocol.RunRecord)."""
        self._run_written = time.perf_counter()
        if not self._step_s or not self.enabled or not self.job_id or self.rank() != 0:
            return
        ordered = sorted(self._step_s)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
        nodes = int(self.env.get("SLURM_JOB_NUM_NODES") or self.env.get("SLURM_NNODES") or 0)
        try:
            protocol.append_run(self.jobdir, protocol.RunRecord(
                job_id=int(self.job_id), restart_count=self.restart_count, steps=self._steps_timed,
                median_step_s=round(median, 6), nodes=nodes, time=time.time()))
        except (OSError, ValueError) as exc:
            _say(f"warning: iteration time not recorded: {exc}")

    # ------------------------------------------------------------------ saving
    def _local_state(self, point: dict[str, Any]) -> dict[str, Any]:
        return {
            "rng": st.capture_rng(),
            "iterators": [r.to_plain() for r in self.positions.live],
            "loader_gens": self.positions.generator_states(),
            "point": point,
        }

    def _save_and_act(self, point: dict[str, Any]) -> None:
        stop, self.pending = self.pending, Stop.NONE
        if stop >= Stop.PREEMPT:
            self.signal_stop = Stop.NONE
        written = self.save(stop, point)
        if stop == Stop.PREEMPT:
            if self.rank() == 0 and written is not None:
                protocol.write_ack(self.jobdir, protocol.Ack(
                    job_id=int(self.job_id), restart_count=self.restart_count, step=written.step,
                    path=str(written.path), bytes=written.bytes, seconds=written.seconds, time=time.time()))
                _say(f"preempted: checkpoint at step {written.step} written, waiting to be requeued")
            self._wait_for_requeue()
        elif stop == Stop.TIMELIMIT:
            if self.rank() == 0:
                _say(f"time limit: checkpoint at step {self.step} written, requeueing")
                self._requeue_self()
            _exit(0)
        elif stop == Stop.TERM:
            if self.rank() == 0:
                _say(f"SIGTERM: checkpoint at step {self.step} written, exiting")
            _exit(128 + signal.SIGTERM)

    def save(self, stop: Stop, point: dict[str, Any]) -> Written | None:
        """Gather every rank's local state; rank 0 writes; everybody waits for the file."""
        local = self._local_state(point)
        world, rank = self.world(), self.rank()
        if world > 1:
            gathered: list[Any] | None = [None] * world if rank == 0 else None
            torch.distributed.gather_object(local, gathered, dst=0, group=self.group())
            ranks = gathered
        else:
            ranks = [local]
        written = None
        if rank == 0:
            payload = {
                "format": FORMAT,
                "job_id": self.job_id,
                "restart_count": self.restart_count,
                "step": self.step,
                "time": time.time(),
                "reason": stop.name.lower(),
                "world_size": world,
                "optimizer_steps": [getattr(o, "_teiresias_steps", 0) for o in self.tracked.live_optimizers()],
                "shared": st.capture_shared(self.tracked),
                "ranks": ranks,
            }
            written = self.store.write(payload, self.step)
            protocol.append_record(self.jobdir, protocol.CheckpointRecord(
                job_id=int(self.job_id), restart_count=self.restart_count, step=written.step,
                path=str(written.path), bytes=written.bytes, seconds=round(written.seconds, 6),
                time=time.time(), reason=stop.name.lower()))
            self.write_run()
        if world > 1:
            torch.distributed.barrier(group=self.group())
        return written

    # ------------------------------------------------------------------ after the save
    def _wait_for_requeue(self) -> None:
        self.waiting = True
        sys.stdout.flush()
        while True:  # the controller requeues us: SIGTERM, then _on_signal exits
            time.sleep(3600)

    def _requeue_self(self) -> None:
        if not self.job_id:
            return
        try:
            # USR1/USR2 ignored in scontrol (SIG_IGN survives exec): a repeated
            # warning forwarded to our descendants must not kill it mid-request.
            subprocess.run(["scontrol", "requeue", self.job_id], check=True, capture_output=True, timeout=30,
                           preexec_fn=_ignore_job_signals)
        except (OSError, subprocess.SubprocessError) as exc:
            _say(f"warning: scontrol requeue {self.job_id} failed: {exc}")


def _quiet_launcher_signal(previous: Callable[..., Any]) -> Callable[..., Any]:
    """torchrun's agent turns SIGTERM into a SignalException that nobody
    catches: at every requeue (and cancel) its traceback landed in the job's
    output. The agent has already stopped its workers when it gets here (and
    logged one line saying so); leave as a process killed by that signal would."""
    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        if exc_type.__name__ == "SignalException" and exc_type.__module__.startswith("torch.distributed.elastic"):
            _exit(128 + int(getattr(exc, "sigval", signal.SIGTERM)))
        previous(exc_type, exc, tb)
    return hook


def _ignore_job_signals() -> None:
    for signum in _SIGNAL_STOP:
        if signum != signal.SIGTERM:
            signal.signal(signum, signal.SIG_IGN)


def _persistent(owner: Any, n: int) -> bool:
    """A later epoch of a persistent-workers loader whose iterator does not exist
    yet in this run: the original only reset its iterator (no base-seed draw),
    we must make one."""
    return (n > 0 and bool(getattr(owner, "persistent_workers", False)) and getattr(owner, "num_workers", 0) > 0
            and getattr(owner, "_iterator", None) is None)


def _set_states(owner: Any, gens: list[torch.Tensor], rng: torch.Tensor) -> None:
    for g, state in zip(generators_of(owner), gens):
        g.set_state(state)
    torch.set_rng_state(rng)


def _exit(code: int) -> None:
    """Leave at once: no atexit handlers (a process group teardown could hang)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
