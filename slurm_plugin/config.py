"""The controller's configuration: kept importable here for the controller's
modules; it lives in teiresias/config.py, below wrappers/ and profiler/, which
read the profile store's location from it too (docs/architecture.md)."""

from teiresias.config import (
    BACKENDS,
    DEFAULT_CONFIG,
    ENV_CONFIG,
    POLLS,
    ControllerConfig,
    MetricsConfig,
    PolicyConfig,
    PreemptionConfig,
    load_config,
    parse_config,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_CONFIG",
    "ENV_CONFIG",
    "POLLS",
    "ControllerConfig",
    "MetricsConfig",
    "PolicyConfig",
    "PreemptionConfig",
    "load_config",
    "parse_config",
]
