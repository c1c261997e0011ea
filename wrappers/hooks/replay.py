"""Replay: which checkpoint a run resumes from, and where in the script it is reached.

Resume (docs/checkpointing.md): when the job directory holds a checkpoint, the
script starts from its beginning in *replay* mode; the newest checkpoint that
loads and is whole is chosen (damaged newer ones are set aside; one that must
not be loaded stops the job with exit 2), an elastic job's is rescaled to the
run's rank count (Gandiva §3.3), and each rank reads its own part: the data
position (``point``) at which every state is loaded and replay ends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from wrappers import protocol
from wrappers.hooks.checkpoint import CheckpointInvalid, CheckpointRefused, CheckpointStore
from wrappers.hooks.ranks import Ranks
from wrappers.hooks.signals import say


class ResumeError(Exception):
    """The checkpoint could not be matched to this run of the script."""


class Replay:
    """The checkpoint being replayed up to its point (``ckpt``; None: not replaying)."""

    def __init__(self, env: os._Environ[str] | dict[str, str], store: CheckpointStore, ranks: Ranks) -> None:
        self.env = env
        self.store = store
        self.ranks = ranks
        self.ckpt: dict[str, Any] | None = None
        self.ckpt_path: Path | None = None

    @property
    def replaying(self) -> bool:
        return self.ckpt is not None

    def find(self) -> None:
        """Enter replay from the newest valid checkpoint, if there is one with a data position."""
        found = self._newest_valid()
        if found is None:
            return
        data, path = found
        data = self._resized(data)
        local = self.local_part(data)
        if local["point"]["kind"] == "none":
            say(
                f"warning: {path.name} has no data position (the script uses no DataLoader "
                f"or api.steps): this run starts from the beginning"
            )
            return
        self.ckpt, self.ckpt_path = data, path

    def take(self) -> tuple[dict[str, Any], Path]:
        """The checkpoint to load now; replay ends."""
        assert self.ckpt is not None and self.ckpt_path is not None
        data, path = self.ckpt, self.ckpt_path
        self.ckpt = None
        return data, path

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

    def _set_aside(self, refused: Sequence[tuple[Path, CheckpointRefused]], then: str) -> None:
        """Rank 0 renames the refused files (every rank reaches the same verdict on the same files)."""
        if self.ranks.rank() != 0:
            return
        for path, exc in refused:
            try:
                moved = self.store.set_aside(path).name
            except FileNotFoundError:
                moved = "(already gone)"
            say(f"warning: {exc}; set aside as {moved}, {then}")

    @staticmethod
    def _fail(reason: str) -> NoReturn:
        say(
            f"error: {reason}. Nothing was loaded. Remove the file, or set "
            f"{protocol.ENV_START_FRESH}=1 to start this job from scratch."
        )
        raise SystemExit(2)

    def _resized(self, data: dict[str, Any]) -> dict[str, Any]:
        """An elastic job resumed at another size (Gandiva §3.3): each rank takes
        the saved rank's RNG state (new ranks rank 0's) and a data position of
        ``pos x old / new`` loader batches: at w ranks a step takes MAX/w batches
        per rank (wrappers/hooks/accumulate.py), so the same steps are done."""
        old = len(data["ranks"])
        d = self.ranks.dist()
        new = d.get_world_size() if d else int(self.env.get("WORLD_SIZE") or 1)
        if old == new or not self.env.get(protocol.ENV_ELASTIC):
            return data

        def scaled(part: dict[str, Any]) -> dict[str, Any]:
            out = dict(part)
            out["point"] = dict(part["point"])
            out["iterators"] = [dict(it) for it in part["iterators"]]
            ends = {(it["ord"], it["n"]) for it in out["iterators"] if it.get("len", -1) == it["pos"] > 0}
            for item in [out["point"], *out["iterators"]]:
                if (item.get("ord"), item.get("n")) in ends and item["pos"] > 0:
                    # An epoch's end: its length at the new size is known when it is rebuilt
                    # (Runtime.on_iter); a short last step makes it no multiple of the old one.
                    item["end"] = True
                elif item.get("pos", -1) > 0:
                    if item["pos"] * old % new:
                        raise ResumeError(
                            f"cannot resume at {new} rank(s): the checkpoint's data position "
                            f"{item['pos']} at {old} rank(s) falls inside an optimizer step"
                        )
                    item["pos"] = item["pos"] * old // new
            return out

        if self.ranks.rank() == 0:
            say(f"elastic: resuming a checkpoint of {old} rank(s) at {new}")
        return {**data, "ranks": [scaled(data["ranks"][r] if r < old else data["ranks"][0]) for r in range(new)]}

    def local_part(self, data: dict[str, Any]) -> dict[str, Any]:
        """This rank's part of a checkpoint (rank 0's when it was written by fewer ranks)."""
        ranks = data["ranks"]
        r = self.ranks.rank()
        if len(ranks) != self.ranks.world() and r == 0:
            say(f"warning: checkpoint was written by {len(ranks)} rank(s), this run has {self.ranks.world()}")
        return ranks[r] if r < len(ranks) else ranks[0]

    def saved_live(self, ord_: int, n: int) -> dict[str, Any] | None:
        """The saved position of iterator (ord_, n), if it was live at the checkpoint."""
        assert self.ckpt is not None
        for it in self.local_part(self.ckpt)["iterators"]:
            if it["ord"] == ord_ and it["n"] == n:
                return it
        return None

    def resolve_end(self, saved: dict[str, Any], length: int) -> None:
        """An iterator saved at its epoch's end (at another size): its position is the
        end of the epoch at this size, and so is the point's if it names this iterator."""
        assert self.ckpt is not None
        saved["pos"] = length
        saved.pop("end", None)
        p = self.local_part(self.ckpt)["point"]
        if p.pop("end", None) and (p["ord"], p["n"]) == (saved["ord"], saved["n"]):
            p["pos"] = length

    def is_point(self, kind: str, ord_: int, n: int, pos: int) -> bool:
        """Whether this data request is the one at which the checkpoint was taken."""
        assert self.ckpt is not None
        p = self.local_part(self.ckpt)["point"]
        return bool(p["kind"] == kind and p["ord"] == ord_ and p["n"] == n and p["pos"] == pos)
