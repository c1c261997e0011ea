"""What a running job really uses, as measured inside it (wrappers/hooks/usage.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobUsage:
    """The job's current run, summed over its nodes at ``time`` (the oldest node's sample).

    ``gpu_util`` is the mean NVML utilization of the job's GPUs in percent and
    ``gpu_mem_used`` / ``gpu_mem_total`` their memory in bytes; all three are
    None where NVML could not be read (no driver, no GPU), never a guess.
    ``cpu_percent`` (100 = one core) and ``rss_bytes`` cover the job's processes.

    For packing (Gandiva §4.2.2: jobs that leave a GPU mostly idle may share
    it): ``teiresias.policy.gandiva.packing`` reads ``gpu_util`` and the memory.
    """

    time: float
    gpu_util: float | None
    gpu_mem_used: int | None
    gpu_mem_total: int | None
    cpu_percent: float
    rss_bytes: int
    # Percent of the run's wall time between optimizer steps spent outside the
    # DataLoader (computing, not waiting for input), from the hooks' step timing
    # (wrappers/hooks/steptime.py): how busy the job keeps its device where NVML
    # cannot say. None: not measured.
    busy: float | None = None

    @property
    def utilisation(self) -> float | None:
        """NVML's GPU utilisation where measured, else the step timing's busy share:
        what Gandiva's packing ranks jobs by (§4.2.2)."""
        return self.gpu_util if self.gpu_util is not None else self.busy
