"""The interference and iteration-time model of SJF-BSBF (docs/sjf-bsbf.md §1-2).

Pure arithmetic on measured or configured numbers; no I/O. The simulator
reads the numbers from ``--sharing-slowdown FILE`` (teiresias.simulator.sharing),
the live controller from the hooks' measured step times.

Times are relative: a job's iteration time at its full per-GPU batch ``B`` is
1, so ``iteration_time(b)`` is the factor by which a sub-batch ``b`` with
``B / b`` accumulation steps stretches the job (eq. 7 over eq. 3-4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from teiresias.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SharingProfile:
    """What the model knows about one DL model (a trace's model name).

    - ``batch``: the per-GPU mini-batch B the user asked for (a power of two
      is not required; candidates are B, B/2, ... rounded down, >= ``min_sub_batch``).
    - ``memory_gb``: GPU memory the job needs at batch B; ``fixed_memory_gb``
      the part that does not scale with the batch (weights, gradients,
      optimizer state). Activations scale linearly with the sub-batch.
    - ``compute_fixed``: share of one full-batch forward+backward that does not
      scale with the batch (kernel launches, the weight update; eq. 3's alpha).
    - ``sync``: all-reduce time relative to a full-batch compute (eq. 4);
      ``overlap`` is Pollux' gamma >= 1 (1: no overlap, large: full overlap).
    - ``interference``: xi, the factor on this job's iteration time while it
      shares its GPUs (eq. 5-6); a pair entry in SharingModel overrides it.
    """

    batch: int = 32
    memory_gb: float = 0.0
    fixed_memory_gb: float = 0.0
    compute_fixed: float = 0.1
    sync: float = 0.2
    overlap: float = 2.0
    interference: float = 1.5

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ConfigError(f"batch {self.batch} must be >= 1")
        if not 0.0 <= self.fixed_memory_gb <= max(self.memory_gb, 0.0) or self.memory_gb < 0:
            raise ConfigError(
                f"memory: need 0 <= fixed_memory_gb ({self.fixed_memory_gb}) <= memory_gb ({self.memory_gb})"
            )
        if not 0.0 <= self.compute_fixed < 1.0:
            raise ConfigError(f"compute_fixed {self.compute_fixed} must be in [0, 1)")
        if self.sync < 0 or self.overlap < 1.0:
            raise ConfigError(f"sync {self.sync} must be >= 0 and overlap {self.overlap} >= 1")
        if self.interference < 1.0:
            raise ConfigError(f"interference {self.interference} must be >= 1 (sharing never speeds a job up)")

    def grad_time(self, b: int) -> float:
        """Eq. 3: one forward+backward of a micro-batch of ``b``, full batch = 1 - sync share."""
        f = self.compute_fixed
        return f + (1.0 - f) * b / self.batch

    def raw_iteration(self, b: int) -> float:
        """Eq. 7 (Pollux' form): (s - 1) plain micro-batches, then the last one overlapped with the all-reduce."""
        s = -(-self.batch // b)
        g = self.grad_time(b)
        gamma = self.overlap
        last = float((g**gamma + self.sync**gamma) ** (1.0 / gamma))  # float ** float is typed Any
        return (s - 1) * g + last

    def iteration_time(self, b: int) -> float:
        """Iteration time with sub-batch ``b`` relative to the full batch (>= 1 for b < B)."""
        return self.raw_iteration(b) / self.raw_iteration(self.batch)

    def memory(self, b: int) -> float:
        """GPU memory at sub-batch ``b`` (GB): fixed part plus activations scaled by b / B."""
        return self.fixed_memory_gb + (self.memory_gb - self.fixed_memory_gb) * min(b, self.batch) / self.batch

    def sub_batches(self, floor: int) -> tuple[int, ...]:
        """Algorithm 2's candidates: B, B/2, B/4, ... down to ``floor`` (at least 1)."""
        out = []
        b = self.batch
        while b >= max(floor, 1):
            out.append(b)
            if b == 1:
                break
            b //= 2
        return tuple(out) or (self.batch,)


@dataclass(frozen=True, slots=True)
class PairOptions:
    """What SharingModel.options gives for a (host model, host sub-batch, guest model)."""

    xi_host: float
    xi_guest: float
    # (sub-batch b, r(b), accumulation steps) for each b that fits memory, largest b first.
    sub_batches: tuple[tuple[int, float, int], ...]


@dataclass(frozen=True)
class SharingModel:
    """Profiles by model name (case-insensitive), pair overrides, and the GPU's memory.

    ``pairs[(a, b)] = (xi_a, xi_b)``: measured interference of model a when
    sharing with b, and of b with a (Fig. 3); looked up in both orders.
    ``gpu_memory_gb`` 0 means unknown: every sub-batch fits.
    """

    profiles: Mapping[str, SharingProfile] = field(default_factory=dict)
    default: SharingProfile = SharingProfile()
    pairs: Mapping[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    gpu_memory_gb: float = 0.0
    min_sub_batch: int = 1

    # Memo of ``options``: what a pair decision needs that depends on the models only (the
    # model is immutable; ``dataclasses.replace`` starts a new memo).
    _options: dict[tuple[str, int | None, str], PairOptions] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def options(self, host_model: str, host_sub_batch: int | None, guest_model: str) -> PairOptions:
        """xi of both and the guest's sub-batches that fit beside the host (Algorithm 2's
        candidates, largest first, with r(b) and the accumulation steps); the same for every
        pair of these models, so computed once (docs/sjf-bsbf.md §4)."""
        key = (host_model, host_sub_batch, guest_model)
        got = self._options.get(key)
        if got is None:
            xi_host, xi_guest = self.interference(host_model, guest_model)
            guest = self.profile(guest_model)
            got = PairOptions(
                xi_host,
                xi_guest,
                tuple(
                    (b, guest.iteration_time(b), -(-guest.batch // b))
                    for b in guest.sub_batches(self.min_sub_batch)
                    if self.fits(host_model, host_sub_batch, guest_model, b)
                ),
            )
            self._options[key] = got
        return got

    def profile(self, model_name: str) -> SharingProfile:
        return self.profiles.get(model_name.strip().lower(), self.default)

    def interference(self, model_a: str, model_b: str) -> tuple[float, float]:
        """(xi_a, xi_b) for a and b sharing GPUs (eq. 5-6)."""
        a, b = model_a.strip().lower(), model_b.strip().lower()
        if (a, b) in self.pairs:
            return self.pairs[(a, b)]
        if (b, a) in self.pairs:
            xb, xa = self.pairs[(b, a)]
            return xa, xb
        return self.profile(a).interference, self.profile(b).interference

    def fits(self, host_model: str, host_sub_batch: int | None, guest_model: str, b: int) -> bool:
        if self.gpu_memory_gb <= 0:
            return True
        host = self.profile(host_model)
        hb = host_sub_batch or host.batch
        return host.memory(hb) + self.profile(guest_model).memory(b) <= self.gpu_memory_gb + 1e-9
