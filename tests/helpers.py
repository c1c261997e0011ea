"""The shared test helpers under their first name; they live in tests/conftest.py."""

from tests.conftest import PROTOCOL_JOB, REPO, poll

__all__ = ["PROTOCOL_JOB", "REPO", "poll"]
