"""Skew S_J of jobs from the communication profiler (Tiresias §3.3.1-§3.3.2).

The profiler (profiler/) records a profiled run's traffic in
``<jobdir>/profile``; when that run ends (finished or preempted) the
controller aggregates it, keeps it in the ProfileStore by job and by model,
and sets the job's skew, which profile placement compares with PACKLIMIT.
Later jobs of the same model get the model's skew when first seen. The model
key is the Slurm job name (``model_key(model_name=name)``): tsbatch passes no
other model name to the controller.
"""

from __future__ import annotations

import logging
from pathlib import Path

from slurm_plugin.controller import channel
from slurm_plugin.controller.state import JobRecord
from teiresias.errors import TeiresiasError
from teiresias.jobfiles import profile_dir

log = logging.getLogger("teiresias.controller")


def model_name(rec: JobRecord) -> str:
    """A job's model key: its Slurm job name (tsbatch passes no other model name)."""
    return rec.name or f"job-{rec.job_id}"


class SkewBook:
    def __init__(self, root: Path) -> None:
        from profiler.store import ProfileStore

        self.store = ProfileStore(root)

    def known(self, rec: JobRecord) -> float | None:
        """The job's own profile's skew, else its model's; None when never profiled."""
        from profiler.store import model_key

        try:
            p = self.store.for_job(rec.job_id) or self.store.get(model_key(model_name(rec)))
        except (TeiresiasError, OSError, ValueError) as exc:
            log.warning("[job %d] profile store unreadable (%s); skew unknown", rec.job_id, exc)
            return None
        return p.skew if p is not None and p.valid else None

    def learn(self, rec: JobRecord) -> float | None:
        """After a profiled run ended: aggregate its records, store them, return the skew."""
        jobdir = channel.folder(rec)
        if not rec.files.profile or jobdir is None:
            return None
        from profiler.aggregate import aggregate_dir
        from profiler.store import model_key

        pdir = profile_dir(jobdir)
        try:
            # Inside the try: a job directory in a private home raises here for a
            # controller that is not root (issue 21 item 1), which must not end the round.
            if not pdir.is_dir():
                return None
            p = aggregate_dir(pdir)
            self.store.put(model_key(model_name(rec)), p, rec.job_id)
        except (TeiresiasError, OSError, ValueError) as exc:
            log.warning("[job %d] profile in %s unusable (%s); skew unknown", rec.job_id, pdir, exc)
            return None
        if not p.valid:
            log.info("[job %d] profiled run gave no skew: %s", rec.job_id, p.reason)
            return None
        log.info("[job %d] profiled: skew %.3f (%s)", rec.job_id, p.skew or 0.0, p.skew_source)
        return p.skew
