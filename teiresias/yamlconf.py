"""Reading the project's input files: text decoding, YAML and key checks in one place.

Every configuration file (cluster.yaml, slowdown.yaml, the controller's
teiresias.yaml, cells.yaml) and every CSV input (trace, cluster_spec.csv,
GPU-time samples) is read through :func:`read_text`, so the same mistake gets
the same one-line error whichever command reads the file:

- missing file, a directory, unreadable file: ``FILE: cannot read <what>:
  no such file`` / ``FILE: is a directory, not a <what> file`` /
  ``FILE: cannot read <what> (why)``;
- not UTF-8: ``FILE:LINE: not UTF-8 text (byte 0x.. ); save the <what> as UTF-8``.
  A UTF-8 byte-order mark (what Windows editors and Excel write) is accepted
  and dropped, so it never shows up glued to the first column name;
- bad YAML: ``FILE:LINE: is not valid YAML (problem)``;
- a key the schema does not know: ``FILE: unknown key 'a.b' (did you mean
  'x'?); valid keys under a are: ...``. Unknown keys are always errors: a
  typo'd key silently falling back to a default is the worst kind of mistake
  in a scheduler's configuration.

The caller picks the exception class (ConfigError for configurations,
TraceError for traces and samples); the message format is the same.
"""

from __future__ import annotations

import codecs
import difflib
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from teiresias.domain.topology import Topology
from teiresias.errors import ConfigError, TeiresiasError


def read_text(path: str | Path, what: str, error: type[TeiresiasError] = ConfigError, hint: str = "") -> str:
    """The file's text, decoded as UTF-8 (a leading byte-order mark dropped).

    ``what`` names the file's role in messages ("trace", "cluster spec");
    ``hint`` ("; pass --config FILE") ends the message of a file that cannot
    be read. Newlines are left as they are (csv and YAML both handle CRLF).
    """
    p = Path(path)
    if p.is_dir():
        raise error(f"{p}: is a directory, not a {what} file; give the file's path")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: cannot read {what}: no such file{hint}") from None
    except OSError as exc:
        raise error(f"{p}: cannot read {what} ({exc.strerror}){hint}") from None
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{p}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the {what} as UTF-8") from None


def load_yaml(path: str | Path, what: str, hint: str = "") -> Any:
    """Read and parse one YAML document (``None`` for an empty file)."""
    text = read_text(path, what, hint=hint)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"{mark.line + 1}:" if mark is not None else ""
        raise ConfigError(f"{path}:{line} is not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def unknown_key(source: str | Path, dotted: str, valid: Iterable[str], under: str = "") -> ConfigError:
    """The one error for a key a schema does not know (``under``: dotted parent, '' at the top)."""
    names = sorted(str(v) for v in valid)
    leaf = dotted.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, names, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    where = f" under {under}" if under else ""
    return ConfigError(f"{source}: unknown key '{dotted}'{hint}; valid keys{where} are: {', '.join(names)}")


def check_keys(source: str | Path, data: Mapping[Any, Any], valid: Iterable[str], under: str = "") -> None:
    """Raise :func:`unknown_key` for the first key of ``data`` not in ``valid``."""
    allowed = set(valid)
    for key in data:
        if key not in allowed:
            dotted = f"{under}.{key}" if under else str(key)
            raise unknown_key(source, dotted, allowed, under)


def mapping(source: str | Path, key: str, value: Any, valid: Iterable[str] | None = None) -> Mapping[Any, Any]:
    """``value`` as a mapping (its keys checked against ``valid`` when given)."""
    if not isinstance(value, Mapping):
        keys = f" with keys {', '.join(sorted(valid))}" if valid is not None else ""
        raise ConfigError(f"{source}: {key}: must be a mapping{keys}, got {_shown(value)}")
    if valid is not None:
        check_keys(source, value, valid, key)
    return value


def number(
    source: str | Path, key: str, value: Any, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    """A YAML number (not a bool, not a quoted string), within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{source}: {key}: must be a number, got {_shown(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{source}: {key}: must be >= {float(minimum)}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{source}: {key}: must be <= {float(maximum)}, got {value!r}")
    return float(value)


def switches(source: str | Path, key: str, value: Any) -> tuple[Topology, list[list[Any]]]:
    """A ``switches`` section, in either form every topology file uses
    (teiresias/domain/topology.py): ``{switch: [node, ...]}``, or
    ``[{name: switch, nodes: [node, ...]}, ...]`` (a list item without a name is
    ``s<index>``). A node is a name, or a mapping with a ``name`` whose other
    keys the caller checks; the second value holds each switch's raw node
    entries in order for that. Errors name ``key`` in the one format above."""
    if isinstance(value, Mapping):
        items = [(str(name), nodes, f"{key}.{name}") for name, nodes in value.items()]
    elif isinstance(value, list):
        items = []
        for i, sw in enumerate(value):
            where = f"{key}[{i}]"
            sw = mapping(source, where, sw, ("name", "nodes"))
            if "nodes" not in sw:
                raise ConfigError(f"{source}: {where}: needs 'nodes' (a list of node names)")
            items.append((str(sw.get("name", f"s{i}")), sw["nodes"], f"{where}.nodes"))
    else:
        raise ConfigError(
            f"{source}: {key}: must map switch names to lists of node names, or list "
            f"{{name, nodes}}; got {_shown(value)}"
        )
    groups: dict[str, tuple[str, ...]] = {}
    raw: list[list[Any]] = []
    for name, nodes, where in items:
        if isinstance(nodes, str) and isinstance(value, Mapping):
            nodes = [nodes]  # {switch: node}: one node (the controller's form always took it)
        elif nodes is None:
            nodes = []
        elif not isinstance(nodes, list):
            raise ConfigError(f"{source}: {where}: must be a list of node names, got {_shown(nodes)}")
        names = []
        for j, nd in enumerate(nodes):
            n = nd.get("name") if isinstance(nd, Mapping) else nd
            if not isinstance(n, str) or not n:
                raise ConfigError(f"{source}: {where}[{j}]: a node needs a name, got {_shown(nd)}")
            names.append(n)
        if name in groups:
            raise ConfigError(f"{source}: {where}: switch {name} is listed twice")
        groups[name] = tuple(names)
        raw.append(list(nodes))
    try:
        return Topology.of(groups), raw
    except ValueError as exc:
        raise ConfigError(f"{source}: {key}: {exc}; each node hangs off one switch") from None


def _shown(value: Any) -> str:
    if isinstance(value, (Mapping, list)):
        return f"a {'mapping' if isinstance(value, Mapping) else 'list'}"
    return repr(value)
