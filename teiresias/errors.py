"""Exception hierarchy. Every error a user can cause is a TeiresiasError whose
message is one line naming the problem and what to do; CLIs print it and exit 2."""


class TeiresiasError(Exception):
    """Base class; ``str(err)`` is the one-line message shown to the user."""


class ConfigError(TeiresiasError):
    """A configuration file or option is wrong."""


class TraceError(TeiresiasError):
    """A trace or samples file is malformed (message names file and line)."""


class SlurmError(TeiresiasError):
    """Slurm refused an operation or is unreachable."""


class SlurmUnreachable(SlurmError):
    """slurmctld did not answer; callers retry on the next round."""


class JobVanished(SlurmError):
    """Slurm no longer knows a job the caller asked about."""
