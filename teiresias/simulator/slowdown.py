"""Per-model skew and placement slowdown (Tiresias §3.3, Table 6, Fig. 12).

A skew-sensitive model (VGG, AlexNet) trains slower when its GPUs span more
nodes than needed; the others barely notice. The simulator charges that as a
factor on run time while a job is not consolidated, and hands the model's
skew (largest-tensor ratio) to the policies as ``Job.skew`` for ``profile``
placement. ``etc/slowdown.yaml`` holds the same table with its derivation;
the built-in copy below is what runs when no file is given (a unit test keeps
the two equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from teiresias import yamlconf
from teiresias.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelProfile:
    skew: float | None
    slowdown: float  # >= 1.0: run time factor when not consolidated
    # Mean GPU utilisation (percent) running alone, Gandiva Table 1; None: unknown.
    # Gandiva's packing reads it (docs/gandiva.md, "Simulator").
    gpu_util: float | None = None


# Table 6 largest-tensor ratios; slowdowns interpolated to Fig. 12's 1.67x max
# (see etc/slowdown.yaml for the derivation).
BUILTIN_MODELS: dict[str, ModelProfile] = {
    "vgg19": ModelProfile(0.715, 1.62),
    "vgg16": ModelProfile(0.743, 1.64),
    "vgg11": ModelProfile(0.773, 1.67),
    "alexnet": ModelProfile(0.610, 1.53),
    "resnet152": ModelProfile(0.039, 1.0),
    "resnet101": ModelProfile(0.053, 1.0),
    "resnet50": ModelProfile(0.092, 1.0, 94.0),
    "inception4": ModelProfile(0.036, 1.0),
    "inception3": ModelProfile(0.086, 1.0),
    "googlenet": ModelProfile(0.146, 1.0),
}
BUILTIN_DEFAULT = ModelProfile(None, 1.0)


@dataclass(frozen=True)
class SlowdownTable:
    """Model name (case-insensitive) -> skew and slowdown factor."""

    models: Mapping[str, ModelProfile] = field(default_factory=lambda: dict(BUILTIN_MODELS))
    default: ModelProfile = BUILTIN_DEFAULT
    # Packed jobs (Gandiva §4.2.2) each run at (1 - pack_overhead) * min(1, 100 / sum of
    # their GPU utilisations) of their alone speed: 0.15 fits Gandiva Table 1's pairs within 0.1.
    pack_overhead: float = 0.15

    def pack_rate(self, utils: list[float | None]) -> float:
        """Each packed job's speed relative to alone; an unknown utilisation counts as 100%."""
        total = sum(100.0 if u is None else u for u in utils)
        return (1.0 - self.pack_overhead) * min(1.0, 100.0 / total if total > 0 else 1.0)

    def profile(self, model_name: str) -> ModelProfile:
        return self.models.get(model_name.strip().lower(), self.default)

    @classmethod
    def none(cls) -> SlowdownTable:
        """No model is sensitive and no skew is known: placement never slows a job."""
        return cls(models={}, default=ModelProfile(None, 1.0))


_PROFILE_KEYS = ("skew", "slowdown", "gpu_util")
_TOP_KEYS = ("default", "models", "pack_overhead")


def _profile(path: Path, where: str, raw: object) -> ModelProfile:
    prof = yamlconf.mapping(path, where, raw, _PROFILE_KEYS)
    skew = prof.get("skew")
    skew_f = None if skew is None else yamlconf.number(path, f"{where}.skew", skew, minimum=0.0, maximum=1.0)
    # slowdown is a factor on run time: below 1 a spread job would run faster.
    slow_f = yamlconf.number(path, f"{where}.slowdown", prof.get("slowdown", 1.0), minimum=1.0)
    util = prof.get("gpu_util")
    util_f = None if util is None else yamlconf.number(path, f"{where}.gpu_util", util, minimum=0.0, maximum=100.0)
    return ModelProfile(skew_f, slow_f, util_f)


def load_slowdown(path: str | Path) -> SlowdownTable:
    """Read a slowdown table in the ``etc/slowdown.yaml`` format (unknown keys are errors)."""
    p = Path(path)
    doc = yamlconf.load_yaml(p, "slowdown table")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{p}: expected a mapping with 'models:' (model name -> {{skew, slowdown}}) "
            "and optionally 'default:'; see etc/slowdown.yaml"
        )
    yamlconf.check_keys(p, doc, _TOP_KEYS)
    models_raw = yamlconf.mapping(p, "models", doc.get("models") or {})
    models = {str(k).lower(): _profile(p, f"models.{k}", v) for k, v in models_raw.items()}
    default = _profile(p, "default", doc["default"]) if "default" in doc else BUILTIN_DEFAULT
    overhead = doc.get("pack_overhead", 0.15)
    overhead_f = yamlconf.number(p, "pack_overhead", overhead, minimum=0.0, maximum=0.99)
    return SlowdownTable(models=models, default=default, pack_overhead=overhead_f)
