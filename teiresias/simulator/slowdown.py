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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import yaml

from teiresias.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ModelProfile:
    skew: float | None
    slowdown: float  # >= 1.0: run time factor when not consolidated


# Table 6 largest-tensor ratios; slowdowns interpolated to Fig. 12's 1.67x max
# (see etc/slowdown.yaml for the derivation).
BUILTIN_MODELS: dict[str, ModelProfile] = {
    "vgg19": ModelProfile(0.715, 1.62),
    "vgg16": ModelProfile(0.743, 1.64),
    "vgg11": ModelProfile(0.773, 1.67),
    "alexnet": ModelProfile(0.610, 1.53),
    "resnet152": ModelProfile(0.039, 1.0),
    "resnet101": ModelProfile(0.053, 1.0),
    "resnet50": ModelProfile(0.092, 1.0),
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

    def profile(self, model_name: str) -> ModelProfile:
        return self.models.get(model_name.strip().lower(), self.default)

    @classmethod
    def none(cls) -> "SlowdownTable":
        """No model is sensitive and no skew is known: placement never slows a job."""
        return cls(models={}, default=ModelProfile(None, 1.0))


def _profile(path: Path, where: str, raw: object) -> ModelProfile:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {where} must be a mapping {{skew: X, slowdown: Y}}")
    skew = raw.get("skew")
    slow = raw.get("slowdown", 1.0)
    try:
        skew_f = None if skew is None else float(skew)
        slow_f = float(slow)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: {where}: skew and slowdown must be numbers") from None
    if slow_f < 1.0:
        raise ConfigError(f"{path}: {where}: slowdown must be >= 1.0 (a factor on run time), got {slow_f}")
    if skew_f is not None and not 0.0 <= skew_f <= 1.0:
        raise ConfigError(f"{path}: {where}: skew is a ratio in [0, 1], got {skew_f}")
    return ModelProfile(skew_f, slow_f)


def load_slowdown(path: str | Path) -> SlowdownTable:
    """Read a slowdown table in the ``etc/slowdown.yaml`` format."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: slowdown table not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("models", {}), dict):
        raise ConfigError(f"{p}: expected 'models:' mapping model name -> {{skew, slowdown}}")
    models = {str(k).lower(): _profile(p, f"models.{k}", v) for k, v in (doc.get("models") or {}).items()}
    default = _profile(p, "default", doc["default"]) if "default" in doc else BUILTIN_DEFAULT
    return SlowdownTable(models=models, default=default)
