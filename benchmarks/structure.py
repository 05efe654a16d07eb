"""The package's structure in figures (issue 29): import cycles counting every import (those
inside functions too), imports of hpctune inside functions, the largest modules and functions.

    python benchmarks/structure.py [--json] [--package hpctune]

The layer contracts themselves are checked by ``lint-imports`` (``tests/run.sh``); this prints
what they do not: how many imports are deferred into functions, and sizes.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def cycles(package: str) -> list[list[str]]:
    """The groups of modules that import each other in a circle (Tarjan's strongly connected
    components of the import graph, imports inside functions included)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]  # iterative Tarjan: (module, next edge to follow)
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def sizes(root: Path) -> dict[str, object]:
    """Imports of the package inside functions (outside the command line and within it), and
    the largest modules and functions (lines, signature and docstring included)."""
    deferred: set[str] = set()
    functions: list[tuple[int, str]] = []
    modules: list[tuple[int, str]] = []
    for path in sorted(root.rglob("*.py")):
        name = str(path.relative_to(root.parent))
        text = path.read_text()
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            functions.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))  # type: ignore[operator]
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    target = (
                        inner.module if isinstance(inner, ast.ImportFrom) else inner.names[0].name
                    )
                    if target and target.split(".")[0] == root.name:
                        deferred.add(f"{name}:{inner.lineno}")
    in_cli = {d for d in deferred if d.startswith(f"{root.name}/cli")}
    return {
        "deferred_imports_outside_cli": len(deferred - in_cli),
        "deferred_imports_in_cli": len(in_cli),
        "largest_modules": sorted(modules, reverse=True)[:3],
        "longest_functions": sorted(functions, reverse=True)[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", default="hpctune")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    figures: dict[str, object] = {"cycles": cycles(args.package)}
    figures.update(sizes(REPO / args.package))
    if args.json:
        print(json.dumps(figures))
        return
    print(f"import cycles (every import): {len(figures['cycles'])}")  # type: ignore[arg-type]
    for group in figures["cycles"]:  # type: ignore[attr-defined]
        print("  " + " ".join(group))
    print(f"imports of {args.package} inside functions: "
          f"{figures['deferred_imports_outside_cli']} outside cli/, "
          f"{figures['deferred_imports_in_cli']} in cli/")  # fmt: skip
    for key in ("largest_modules", "longest_functions"):
        print(key.replace("_", " ") + ":")
        for lines, name in figures[key]:  # type: ignore[attr-defined]
            print(f"  {lines:5d}  {name}")


if __name__ == "__main__":
    main()
