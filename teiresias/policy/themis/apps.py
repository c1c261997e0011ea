"""Which app a job belongs to (Themis §2: an app is a group of related jobs, e.g. a hyper-parameter search)."""

from __future__ import annotations

import re

from teiresias.domain import Job

# The leading letters of a job name: "search-3", "search_12" and "search7" are one app;
# a search names its trials by a common stem and a trial number.
_STEM = re.compile(r"[A-Za-z]+")


def name_prefix(name: str) -> str:
    """The stem of a job name (its leading letters; the whole name if it starts otherwise)."""
    m = _STEM.match(name)
    return m.group(0) if m else name


def app_of(job: Job) -> str:
    """The app of ``job``: its explicit app (``tsbatch --app``, a trace's ``app`` column), else
    its account (or user, without one) plus the stem of its job name, as ``account/stem``; a
    job with no owner at all (a trace without those columns) is in the app ``stem``."""
    if job.app:
        return job.app
    owner = job.account or job.user
    return f"{owner}/{name_prefix(job.model_name)}" if owner else name_prefix(job.model_name)
