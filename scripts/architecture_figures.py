#!/usr/bin/env python3
"""Print the figures docs/architecture.md keeps: the import graph between the
project's packages (module-level and in-function imports counted apart, since
an import inside a function hides an edge from a reader of the module head)
and the line counts of the largest classes.

Usage: scripts/architecture_figures.py [ROOT]   (ROOT: a checkout, default
this one). It reads the files as text (ast); it imports nothing of the project,
so it can measure an old commit's worktree too.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

# The packages the layers speak of, most specific first (a module belongs to
# the first prefix it starts with).
PACKAGES = (
    "teiresias.jobfiles",
    "teiresias.config",
    "teiresias.domain",
    "teiresias.policy",
    "teiresias.cells",
    "teiresias.simulator",
    "teiresias.cli",
    "teiresias",
    "slurm_plugin",
    "wrappers",
    "profiler",
)
TOP = ("teiresias", "slurm_plugin", "wrappers", "profiler")


def package_of(module: str) -> str | None:
    for p in PACKAGES:
        if module == p or module.startswith(p + "."):
            return p
    return None


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(tree: ast.Module, module: str, is_pkg: bool) -> list[tuple[str, bool]]:
    """(imported module, inside a function) for every import of the file."""
    out: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_func: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, in_func) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")
                    drop = child.level - (1 if is_pkg else 0)
                    base = base[: len(base) - drop] if drop else base
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                out.append((target, in_func))
            visit(child, nested)

    visit(tree, False)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    edges: Counter[tuple[str, str, str]] = Counter()
    classes: list[tuple[int, str]] = []
    for top in TOP:
        for path in sorted((root / top).rglob("*.py")):
            module = module_name(root, path)
            src = package_of(module)
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for target, in_func in imports(tree, module, path.name == "__init__.py"):
                dst = package_of(target)
                if src and dst and src != dst:
                    edges[(src, dst, "in-function" if in_func else "module")] += 1
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                    n = node.end_lineno - node.lineno + 1
                    classes.append((n, f"{module}.{node.name}"))
    print("import graph (package -> package: module-level / in-function imports)")
    pairs = sorted({(s, d) for s, d, _ in edges})
    for s, d in pairs:
        print(f"  {s:20} -> {d:20} {edges[(s, d, 'module')]:3d} / {edges[(s, d, 'in-function')]:3d}")
    print("largest classes (lines)")
    for n, name in sorted(classes, reverse=True)[:10]:
        print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
