"""Errors of the local cluster."""

from teiresias.errors import TeiresiasError


class LocalClusterError(TeiresiasError):
    """The local cluster could not be started, stopped or inspected; the
    message says why and what to do (e.g. read a named log file)."""
