"""Reading a GPU-sharing model (``simulate --sharing-slowdown FILE``; etc/sharing.yaml).

The file gives, per model, the batch and memory footprint and the
interference ratio xi (SJF-BSBF eq. 5-6), plus measured pair ratios; the
policies get a pure :class:`SharingModel` (docs/sjf-bsbf.md).
"""

from __future__ import annotations

from pathlib import Path

from teiresias import yamlconf
from teiresias.errors import ConfigError
from teiresias.policy.sjf_bsbf.model import SharingModel, SharingProfile

_PROFILE_KEYS = ("batch", "memory_gb", "fixed_memory_gb", "compute_fixed", "sync", "overlap", "interference")
_TOP_KEYS = ("gpu_memory_gb", "min_sub_batch", "default", "models", "pairs")
_PAIR_KEYS = ("models", "interference")


def _profile(path: Path, where: str, raw: object, base: SharingProfile) -> SharingProfile:
    prof = yamlconf.mapping(path, where, raw, _PROFILE_KEYS)
    kw: dict = {}
    for key in _PROFILE_KEYS:
        if key in prof:
            v = yamlconf.number(
                path, f"{where}.{key}", prof[key], minimum=1.0 if key in ("batch", "overlap", "interference") else 0.0
            )
            if key == "batch":
                if v != int(v):
                    raise ConfigError(f"{path}: {where}.batch: must be a whole number of samples, got {v!r}")
                v = int(v)
            kw[key] = v
        else:
            kw[key] = getattr(base, key)
    if "memory_gb" in prof and "fixed_memory_gb" not in prof:
        kw["fixed_memory_gb"] = 0.0
    try:
        return SharingProfile(**kw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {where}: {exc}") from None


def load_sharing_model(path: str | Path) -> SharingModel:
    """A SharingModel from YAML (unknown keys are errors; see etc/sharing.yaml)."""
    p = Path(path)
    doc = yamlconf.load_yaml(p, "sharing model")
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: expected a mapping with 'default:', 'models:' and 'pairs:'; see etc/sharing.yaml")
    yamlconf.check_keys(p, doc, _TOP_KEYS)
    default = _profile(p, "default", doc.get("default", {}), SharingProfile())
    models = {}
    for name, raw in yamlconf.mapping(p, "models", doc.get("models", {})).items():
        models[str(name).strip().lower()] = _profile(p, f"models.{name}", raw, default)
    pairs: dict[tuple[str, str], tuple[float, float]] = {}
    raw_pairs = doc.get("pairs", [])
    if not isinstance(raw_pairs, list):
        raise ConfigError(f"{p}: pairs: must be a list of {{models: [a, b], interference: [xi_a, xi_b]}}")
    for i, raw in enumerate(raw_pairs):
        where = f"pairs[{i}]"
        item = yamlconf.mapping(p, where, raw, _PAIR_KEYS)
        ms, xs = item.get("models"), item.get("interference")
        if not (isinstance(ms, list) and len(ms) == 2 and isinstance(xs, list) and len(xs) == 2):
            raise ConfigError(f"{p}: {where}: give models: [a, b] and interference: [xi_a, xi_b]")
        xa = yamlconf.number(p, f"{where}.interference[0]", xs[0], minimum=1.0)
        xb = yamlconf.number(p, f"{where}.interference[1]", xs[1], minimum=1.0)
        pairs[(str(ms[0]).strip().lower(), str(ms[1]).strip().lower())] = (xa, xb)
    gpu_mem = yamlconf.number(p, "gpu_memory_gb", doc.get("gpu_memory_gb", 0.0), minimum=0.0)
    floor = yamlconf.number(p, "min_sub_batch", doc.get("min_sub_batch", 1), minimum=1.0)
    return SharingModel(profiles=models, default=default, pairs=pairs, gpu_memory_gb=gpu_mem, min_sub_batch=int(floor))
