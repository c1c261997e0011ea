"""Profiles kept under the controller's state directory (Tiresias §3.3.1).

Tiresias profiles a job only if its model was not profiled before
(Pseudocode 2, line 21). Profiles are therefore keyed by model: the model
name the user gave, else the training script's real path. Layout (JSON files,
each written atomically, readable by hand)::

    <root>/by-model/<sha1 of key>.json   {"key", "job_id", "profile"}  last VALID profile
    <root>/by-job/<job id>.json          {"key", "profile"}            every job's result

An invalid ("no profile") result never replaces a valid one for the model, so
a job killed mid-profile does not erase what an earlier run learnt.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from profiler.aggregate import Profile
from teiresias.errors import ConfigError
from teiresias.jobfiles import write_json_atomic


def model_key(model_name: str = "", script: str = "") -> str:
    """The reuse key: ``model:<name>`` if the user named the model, else
    ``script:<real path of the training script>``."""
    if model_name.strip():
        return "model:" + model_name.strip()
    if script.strip():
        return "script:" + os.path.realpath(os.path.expanduser(script.strip()))
    raise ConfigError("a profile key needs a model name or a training script path")


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ProfileStore:
    """Profiles by model key and by job id, in JSON files under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.expanduser(str(root)))

    def _model_path(self, key: str) -> Path:
        return self.root / "by-model" / (hashlib.sha1(key.encode()).hexdigest() + ".json")

    def _job_path(self, job_id: int | str) -> Path:
        jid = str(job_id)
        if not jid or not all(c.isalnum() or c in "._-" for c in jid) or jid.startswith("."):
            raise ConfigError(f"bad job id {jid!r}: use the Slurm job id (digits)")
        return self.root / "by-job" / f"{jid}.json"

    def put(self, key: str, profile: Profile, job_id: int | str | None = None) -> None:
        """Record a job's profile; it becomes the model's profile if it is valid."""
        if job_id is not None:
            write_json_atomic(self._job_path(job_id), {"key": key, "profile": profile.to_json()})
        if profile.valid:
            write_json_atomic(
                self._model_path(key),
                {"key": key, "job_id": None if job_id is None else str(job_id), "profile": profile.to_json()},
            )

    def get(self, key: str) -> Profile | None:
        """The model's last valid profile, or None (profile it on its next run)."""
        data = _read_json(self._model_path(key))
        if not data or data.get("key") != key or "profile" not in data:
            return None
        return Profile.from_json(data["profile"])

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def for_job(self, job_id: int | str) -> Profile | None:
        """The profile recorded for a job: its own result, else its model's."""
        data = _read_json(self._job_path(job_id))
        if not data or "profile" not in data:
            return None
        own = Profile.from_json(data["profile"])
        if own.valid:
            return own
        return self.get(data.get("key", "")) or own

    def key_of_job(self, job_id: int | str) -> str | None:
        data = _read_json(self._job_path(job_id))
        return data.get("key") if data else None
