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
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from wrappers import protocol
from wrappers.hooks import state as st
from wrappers.hooks import usage
from wrappers.hooks.checkpoint import (
    FORMAT,
    CheckpointDirUnusable,
    CheckpointNotWritten,
    CheckpointsReadOnly,
    CheckpointStore,
    Written,
)
from wrappers.hooks.device import DeviceSwitch
from wrappers.hooks.positions import Consumed, IterRecord, Positions, generators_of
from wrappers.hooks.ranks import Ranks
from wrappers.hooks.replay import Replay, ResumeError
from wrappers.hooks.signals import (
    SIGNAL_STOP,
    Stop,
    exit_now,
    ignore_job_signals,
    quiet_launcher_signal,
    requeue_self,
    say,
    wait_for_requeue,
)
from wrappers.hooks.steptime import StepTimer
from wrappers.hooks.suspend import Suspender

if TYPE_CHECKING:  # accumulate imports this module (through patches)
    from wrappers.hooks.accumulate import Accumulator

# Re-exported: api.py and the benchmarks import Stop from here.
__all__ = ["ResumeError", "Runtime", "Stop"]


class Runtime:
    """One per process: the hooks' entry points (``on_iter``, ``on_next``,
    ``on_step``) in the order of the stop protocol above. Its parts, each with
    one job: ``ranks`` (rank agreement, ranks.py), ``replay`` (which checkpoint
    and where it is reached, replay.py), ``timer`` (iteration time,
    steptime.py), the signals (signals.py) and ``suspender`` (time-slicing,
    suspend.py). All methods run on the main thread (signal handlers only set
    ``signal_stop``)."""

    def __init__(self, env: os._Environ[str] | dict[str, str]) -> None:
        self.env = env
        self.job_id = env.get("SLURM_JOB_ID", "")
        self.restart_count = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
        self.every = int(env.get(protocol.ENV_EVERY, "0") or 0)
        base = env.get(protocol.ENV_BASE, protocol.DEFAULT_BASE)
        # The batch shell names this incarnation's folders (teiresias/jobfiles.py): the job
        # directory (checkpoints) and the control folder the controller reads (Ack,
        # handshake markers, records); a job started otherwise keeps <base>/<job id> for both.
        self.key = env.get(protocol.ENV_JOB_KEY, "")
        self.jobdir: Path = Path(env.get(protocol.ENV_JOB_DIR) or protocol.job_dir(base, self.job_id or "nojob"))
        self.ctldir: Path = Path(env.get(protocol.ENV_CONTROL_DIR) or self.jobdir)
        self.ctl_in: Path = Path(env.get(protocol.ENV_CONTROL_IN) or self.jobdir)
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
        self.started = False  # this run's started marker is made (ensure_loaded)
        self.resumed_from: int | None = None
        self._dir_checked = False
        self.writable = True  # False: checkpoints can be read, not written (usable())
        self.save_failures = 0  # periodic/API saves that failed this run (reported once)
        # Start of the logical run (this process, or the first run of the checkpoint chain it
        # resumes): a file the script reads during replay that is newer was written by this job.
        self.job_start = time.time()
        self.state_loads = 0  # the script's own Optimizer.load_state_dict calls (logical run)
        self.restoring = False  # our own load_state_dict calls are not the script's
        self.skipped_saves = 0  # the script's torch.save calls skipped in replay
        self.fetch_skipped = False  # the iterator being made fetches the batches it skips (on_iter)
        self.ranks = Ranks(env)
        self.replay = Replay(env, self.store, self.ranks)
        self.timer = StepTimer(
            env, self.ctldir, self.job_id, self.restart_count, lambda: self.enabled and self.rank() == 0
        )
        self.suspender = Suspender(self.ctldir, self.job_id, self.restart_count)
        # A job bound to several GPUs runs on the one the controller names (device.py).
        self.device = DeviceSwitch(env, self.control_in, self.ctldir, self.job_id, self.restart_count)
        # GPU sharing's sub-batches (accumulate.py), when the job dir asks for them: set by patches.install
        self.accumulator: Accumulator | None = None

    # ------------------------------------------------------------------ ranks
    def rank(self) -> int:
        return self.ranks.rank()

    def world(self) -> int:
        return self.ranks.world()

    # ------------------------------------------------------------------ signals
    def install_signals(self) -> None:
        atexit.register(self.write_run)  # a run that ends normally reports its iteration time
        atexit.register(self.at_exit)
        sys.excepthook = quiet_launcher_signal(sys.excepthook)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNAL_STOP:
            signal.signal(signum, self._on_signal)
        atexit.register(ignore_job_signals)  # runs late: atexit calls handlers last-in first-out
        # Time-slicing (scontrol suspend): park at the next step boundary. A process
        # that trains nothing (torchrun's agent) or waits to be requeued stops at once.
        self.suspender.install(lambda: bool(self.tracked.live_optimizers()) and not self.waiting)

    def _on_signal(self, signum: int, frame: Any) -> None:
        stop = SIGNAL_STOP[signum]
        if self.waiting:
            # Checkpoint and Ack are done: a requeue (SIGTERM) just ends us; a time
            # limit while we wait means nobody requeued us, so we do it ourselves.
            if stop == Stop.TIMELIMIT:
                requeue_self(self.job_id)
            if stop in (Stop.TERM, Stop.TIMELIMIT):
                exit_now(0)
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
            except CheckpointsReadOnly as exc:
                # Resume from what is there (a valid checkpoint must not be ignored); a save
                # fails with one line and the previous checkpoint stays (issue 23 item 6).
                self.writable = False
                if self.rank() == 0:
                    say(
                        f"warning: checkpoints can be read but not written: {exc}; this run resumes "
                        f"from them, a preemption will save nothing new"
                    )
            except CheckpointDirUnusable as exc:
                self.enabled = False
                if self.rank() == 0:
                    say(
                        f"warning: checkpoints disabled, the job runs without them: {exc} "
                        f"(choose another directory with tsbatch --checkpoint-dir)"
                    )
            else:
                # GPU/CPU usage for the controller (wrappers/hooks/usage.py); one sampler per node.
                usage.start(self.env, self.ctldir, self.job_id, self.restart_count)
        return self.enabled

    def control_in(self) -> Path | None:
        """The folder the controller writes this job's settings to (accumulate.json), or
        None: a spool ``.in`` folder counts only when the controller owns it (anyone may
        create a name in the spool; teiresias/jobfiles.py)."""
        if self.ctl_in == self.jobdir or protocol.controller_folder(self.ctl_in):
            return self.ctl_in
        if self.ctl_in.exists() and self.rank() == 0:
            say(f"warning: {self.ctl_in} is not the controller's; its settings are ignored")
        return None

    # ------------------------------------------------------------------ resume
    def ensure_loaded(self) -> None:
        """On the first data request or step: find this job's checkpoint and enter replay,
        and tell the batch shell this run has started (``_note_run_started``)."""
        self.find_checkpoint()
        if not self.started and self.enabled:
            self.started = True
            self._note_run_started()

    def find_checkpoint(self) -> None:
        """Find this job's checkpoint and enter replay (once): also on the script's own
        torch.save/torch.load, which may come before its first data request."""
        if self.loaded:
            return
        self.loaded = True
        if self.usable():
            self.replay.find()

    def _note_run_started(self) -> None:
        """Tell the batch shell this run is about to use its state, then honour a
        preemption it was asked for before our signal handlers existed.

        The order matters (docs/checkpointing.md, "A preemption before the hooks
        are ready"): the shell records the request, then looks for our marker.
        Either it sees none and acks "nothing new" itself, or we made the marker
        first; then either our handler got its forwarded USR1 or the request was
        recorded before we look for it here."""
        try:
            protocol.mark_run_started(self.ctldir, self.restart_count, os.getpid())
        except OSError as exc:
            if self.writable or self.ctldir != self.jobdir:  # (a read-only job directory: said once already)
                say(f"warning: cannot mark this run as started in {self.ctldir}: {exc.strerror or exc}")
        if protocol.preempt_requested(self.ctldir, self.restart_count):
            self.signal_stop = max(self.signal_stop, Stop.PREEMPT)

    @property
    def replaying(self) -> bool:
        return self.replay.replaying

    @property
    def ckpt(self) -> dict[str, Any] | None:
        """The checkpoint being replayed (None: not replaying)."""
        return self.replay.ckpt

    def restore(self) -> None:
        """Load every state at the point where the checkpoint was taken; replay ends."""
        data, path = self.replay.take()
        local = self.replay.local_part(data)
        self.restoring = True
        try:
            st.restore_shared(self.tracked, data["shared"])
        except (st.StateMismatch, RuntimeError, KeyError, ValueError) as exc:
            self.refuse(f"cannot resume from {path}: {exc}")
        finally:
            self.restoring = False
        self.job_start = data.get("job_start", self.job_start)
        self.state_loads = data.get("state_loads", self.state_loads)
        st.restore_rng(local["rng"])
        self.positions.restore_generator_states(local["loader_gens"])
        for opt, n in zip(self.tracked.live_optimizers(), data["optimizer_steps"]):
            opt._teiresias_steps = n  # type: ignore[attr-defined]
        self.step = data["step"]
        self.resumed_from = data["step"]
        if self.rank() == 0:
            say(f"resumed from {path.name} at step {self.step}")

    # ------------------------------------------------------------------ hooks
    def on_iter(self, owner: Any, kind: str, make: Callable[[int, Any], Any]) -> tuple[Any, IterRecord | None]:
        """``iter(loader)``: name the iteration; in replay, rebuild it where it was.
        ``make(skip, at_start)`` builds the real iterator past ``skip`` items,
        calling ``at_start()`` (if not None) just before its sampler starts."""
        self.ensure_loaded()
        if not self.enabled:
            return make(0, None), None
        ord_, n = self.positions.peek(owner)
        if n == 0 and kind == "loader" and self.env.get(protocol.ENV_ELASTIC):
            from wrappers.hooks.accumulate import elastic_mismatch

            why = elastic_mismatch(owner, self.env)
            if why:
                self.refuse(why)
        if self.pending:
            self._save_and_act({"kind": "iter", "ord": ord_, "n": n, "pos": 0})
        skip, at_start = 0, None
        if self.replaying:
            saved = self.replay.saved_live(ord_, n)
            if self.replay.is_point("iter", ord_, n, 0):
                self.restore()
                first = self.positions.first.get(ord_)
                if _persistent(owner, n) and first is not None:
                    # As below: creation draws as at epoch 0, the sampler as at epoch n.
                    saved = {"gens": [g.get_state() for g in generators_of(owner)], "rng": torch.get_rng_state()}
                    _set_states(owner, *first)
                    at_start = lambda: _set_states(owner, saved["gens"], saved["rng"])  # noqa: E731
            elif saved is not None:
                if saved.get("end"):
                    self.replay.resolve_end(saved, len(owner))
                # Put back the generator states the original run had when it made this
                # iterator, so it draws the same base seed and the same permutation.
                skip = saved["pos"]
                # Workers that drew random numbers (augmentation) must draw them again for the
                # batches before the position, each in its worker: fetched and dropped.
                self.fetch_skipped = bool(saved.get("worker_rng")) and not _persistent(owner, n)
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
            assert saved is not None  # at_start is only ever set together with saved
            rec.gens, rec.rng = saved["gens"], saved["rng"]
        try:
            it = make(skip, at_start)
        finally:
            self.fetch_skipped = False
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
            if not self.replay.is_point("next", rec.ord, rec.n, rec.pos):
                self.positions.finished(rec)
                return False
            self.restore()
        return True

    def on_step(self, optimizer: Any) -> None:
        """After every ``optimizer.step()``: count, and decide (with all ranks) whether to stop."""
        self.tracked.training_started()
        n = getattr(optimizer, "_teiresias_steps", 0) + 1
        optimizer._teiresias_steps = n
        new_step = n > self.step
        self.step = max(self.step, n)
        self.ensure_loaded()
        if self.replaying:
            self.refuse(
                "an optimizer step ran before the resume point was reached: this script does not "
                "replay deterministically up to its checkpoint (see docs/checkpointing.md)"
            )
        if not self.enabled:
            if self.suspender.requested:
                self._park()
            return
        persistent = self.positions.persistent_random_workers()
        if persistent is not None:
            self.refuse(
                f"persistent DataLoader workers draw random numbers (loader {persistent}: random augmentation): "
                f"they keep their generators from epoch to epoch, which a resumed run cannot give back, so a "
                f"preemption would change the training. Set persistent_workers=False (workers made for each "
                f"epoch are resumed exactly), or submit with tsbatch --no-checkpoint"
            )
        if new_step:  # several optimizers stepping together make one iteration
            self.timer.tick()
            gpu = self.device.wanted()
            if gpu is not None:
                self.device.switch(gpu, self.step, self.tracked.models(), self.tracked.live_optimizers(), self.rank())
        stop = self.signal_stop
        if self.every and self.step % self.every == 0:
            stop = max(stop, Stop.PERIODIC)
        if self.api_request:
            self.api_request = False
            stop = max(stop, Stop.API)
        # Every rank parks (and stops) after the same step.
        agreed, suspend = self.ranks.agree(int(stop), self.suspender.requested)
        stop = Stop(agreed)
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
        self.timer.pause()
        gpu = self.device.wanted(force=True)  # the controller may resume it on another GPU
        if gpu is not None:
            self.device.switch(gpu, self.step, self.tracked.models(), self.tracked.live_optimizers(), self.rank())

    # ------------------------------------------------------------------ the script's own files and state
    def on_script_save(self, f: Any) -> bool:
        """``torch.save`` by the script: False to skip it. Before the resume point the
        original run made every save the script makes again (its files are there,
        right); made again, they would hold the fresh model of the replay. Only saves
        to a path are skipped: one to a buffer (Lightning writes that to the file
        next) must give bytes."""
        self.find_checkpoint()
        if not self.replaying or not isinstance(f, (str, os.PathLike)):
            return True
        self.skipped_saves += 1
        if self.skipped_saves == 1 and self.rank() == 0:
            say("replaying to the checkpoint: the script's torch.save calls are skipped until then (made already)")
        return False

    def on_script_load(self, f: Any) -> None:
        """``torch.load`` by the script: during replay, a file this job wrote after the
        checkpoint's run began means the script resumes itself (issue 23 item 1)."""
        self.find_checkpoint()
        if not self.replaying or not isinstance(f, (str, os.PathLike)):
            return
        start = (self.ckpt or {}).get("job_start")
        try:
            mtime = os.stat(f).st_mtime
        except OSError:
            return
        if isinstance(start, float) and mtime >= start:
            self.refuse_self_resume(f"reads {os.fspath(f)}, which this job wrote {time.ctime(mtime)}")

    def on_state_load(self) -> None:
        """``Optimizer.load_state_dict`` by the script: counted; during replay one more than
        the original run had made by its checkpoint means the script restores itself."""
        if self.restoring:
            return
        self.find_checkpoint()
        self.state_loads += 1
        if self.replaying and self.state_loads > int((self.ckpt or {}).get("state_loads", self.state_loads)):
            self.refuse_self_resume("loads an optimizer state the original run had not loaded by then")

    def refuse_self_resume(self, what: str) -> NoReturn:
        step = (self.ckpt or {}).get("step", "?")
        self.refuse(
            f"the script {what}, before reaching the checkpoint at step {step}: it resumes itself, "
            f"which the hooks' replay cannot follow. Submit it with tsbatch --no-checkpoint to let its own "
            f"checkpoints resume it, or skip its own resume when wrappers.hooks.api.resumed_step() is not None"
        )

    def refuse(self, reason: str) -> NoReturn:
        """Stop with one line and exit 2 before any wrong step (the checkpoints stay)."""
        if self.rank() == 0:
            say(f"error: {reason}. Nothing was changed: the checkpoints are as they were.")
        exit_now(2)

    def at_exit(self) -> None:
        """A run that ends still replaying never reached its checkpoint: what it did is not
        the training it resumes (issue 23 item 1: it ended COMPLETED 0 with 0 steps)."""
        if self.replaying:
            self.refuse(
                f"the script ended before reaching the checkpoint at step {(self.ckpt or {}).get('step', '?')} "
                f"it was resuming: it does not replay deterministically up to it (see docs/checkpointing.md)"
            )

    # ------------------------------------------------------------------ iteration time
    def write_run(self) -> None:
        """This run's median iteration time to runs.jsonl (steptime.py; also at exit)."""
        self.timer.write_run()

    # ------------------------------------------------------------------ saving
    def _local_state(self, point: dict[str, Any]) -> dict[str, Any]:
        for r in self.positions.live:
            r.worker_rng = self.positions.worker_rng(r.ord)
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
        written, failed = self.save(stop, point)
        if stop == Stop.PREEMPT:
            if self.rank() == 0:
                self._ack(written)
                if written is not None:
                    say(f"preempted: checkpoint at step {written.step} written, waiting to be requeued")
            self.waiting = True
            wait_for_requeue()
        elif stop == Stop.TIMELIMIT:
            if self.rank() == 0:
                if not failed:
                    say(f"time limit: checkpoint at step {self.step} written, requeueing")
                requeue_self(self.job_id)  # written or not: a later run resumes from the newest checkpoint
            exit_now(0)
        elif stop == Stop.TERM:
            if self.rank() == 0 and not failed:
                say(f"SIGTERM: checkpoint at step {self.step} written, exiting")
            exit_now(128 + signal.SIGTERM)

    def _ack(self, written: Written | None) -> None:
        """Answer the preemption: the checkpoint just written, or (the save failed) "nothing
        new saved" with the newest checkpoint's step, as the batch shell's early Ack."""
        newest = self.store.list()
        ack = protocol.Ack(
            job_id=int(self.job_id),
            restart_count=self.restart_count,
            step=written.step if written else (newest[-1][1] if newest else 0),
            path=str(written.path) if written else "",
            bytes=written.bytes if written else 0,
            seconds=written.seconds if written else 0.0,
            time=time.time(),
            saved=written is not None,
            key=self.key,
        )
        try:
            protocol.write_ack(self.ctldir, ack)
        except OSError as exc:
            say(
                f"error: cannot write the preemption Ack in {self.ctldir}: {exc.strerror or exc}; "
                f"waiting to be requeued after the controller's grace time"
            )

    def save(self, stop: Stop, point: dict[str, Any]) -> tuple[Written | None, bool]:
        """Gather every rank's local state; rank 0 writes; everybody waits for the file.
        Returns (what rank 0 wrote, whether its write failed); a failed write costs one
        line and keeps every earlier checkpoint (issue 23 item 5)."""
        world, rank = self.world(), self.rank()
        ranks = self.ranks.gather(self._local_state(point))
        written, failed = None, False
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
                "job_start": self.job_start,
                "state_loads": self.state_loads,
                "shared": st.capture_shared(self.tracked),
                "ranks": ranks,
            }
            try:
                written = self.store.write(payload, self.step)
                protocol.append_record(
                    self.ctldir,
                    protocol.CheckpointRecord(
                        job_id=int(self.job_id),
                        restart_count=self.restart_count,
                        step=written.step,
                        path=str(written.path),
                        bytes=written.bytes,
                        seconds=round(written.seconds, 6),
                        time=time.time(),
                        reason=stop.name.lower(),
                    ),
                )
            except (CheckpointNotWritten, OSError) as exc:
                failed = True
                self._say_not_written(stop, written, exc)
            self.write_run()
        self.ranks.barrier()
        return written, failed

    def _say_not_written(self, stop: Stop, written: Written | None, exc: Exception) -> None:
        """One line for a failed save (a failed periodic one once per run): what is kept, what follows."""
        if stop < Stop.PREEMPT:
            self.save_failures += 1
            if self.save_failures > 1:
                return
        if written is not None:  # the checkpoint is whole; only its record line is missing
            say(f"warning: checkpoint at step {written.step} written, its record not: {exc}")
            return
        newest = self.store.list()
        kept = (
            f"the previous checkpoint ({newest[-1][2].name}, step {newest[-1][1]}) is kept"
            if newest
            else "no earlier checkpoint exists"
        )
        then = {
            Stop.PREEMPT: "acknowledging the preemption with nothing new saved",
            Stop.TIMELIMIT: "requeueing: the next run resumes from the previous checkpoint",
            Stop.TERM: "exiting",
        }.get(stop, "training goes on (further failures of periodic checkpoints are not reported)")
        reason = f"{exc.strerror} ({exc.filename or self.jobdir})" if isinstance(exc, OSError) and exc.strerror else exc
        say(f"error: checkpoint at step {self.step} not written: {reason}; {kept}; {then}")


def _persistent(owner: Any, n: int) -> bool:
    """A later epoch of a persistent-workers loader whose iterator does not exist
    yet in this run: the original only reset its iterator (no base-seed draw),
    we must make one."""
    return (
        n > 0
        and bool(getattr(owner, "persistent_workers", False))
        and getattr(owner, "num_workers", 0) > 0
        and getattr(owner, "_iterator", None) is None
    )


def _set_states(owner: Any, gens: list[torch.Tensor], rng: torch.Tensor) -> None:
    for g, state in zip(generators_of(owner), gens):
        g.set_state(state)
    torch.set_rng_state(rng)
