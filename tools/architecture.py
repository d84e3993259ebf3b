#!/usr/bin/env python3
"""The package's shape, measured: modules and their sizes, the import graph, its cycles, and the layers.

    python3 tools/architecture.py            # the tree with line counts, the largest module, cycles, upward imports

Every import is counted, the lazy ones inside functions too (they decide what a module needs just as much), except
those under ``if TYPE_CHECKING:``. Modules are grouped into *units*: a subpackage of ``notebook_accel`` (``engines``,
``launcher``, ...), ``widgets``, or a single top-level module (``events``, ``state``, ...). :data:`LAYERS` orders the
units from the bottom up; an *upward import* is one from a unit to a unit of a higher layer. ``tests/test_architecture.py``
holds the package to: no import cycle between modules, none between units, no upward import, no module over
:data:`MAX_LINES` lines. ``docs/ARCHITECTURE.md`` explains the layers and the seams.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400

#: The units from the bottom up: a unit may import units of its own layer or below, never above.
LAYERS: tuple[tuple[str, ...], ...] = (
    # facts and vocabulary: no torch at import, no other unit of the package
    ("_lazy", "errors", "environment", "durations", "cell_names", "ipython_tracebacks", "import_hooks", "nvml",
     "terminal", "events", "progress_hook", "peer_loss", "periodic"),
    ("hardware", "metrics_batch", "channel", "argument_checks", "utils", "cluster"),
    # the worker-side building blocks of an Accelerator
    ("state", "gradient_state", "kwargs_handlers", "plugins", "logging", "config", "precision", "float8", "profiling",
     "progress", "ops", "memory", "empty_weights", "scheduler", "optimizer", "parameter_map", "comm_hooks", "model",
     "data", "tracking", "monitor", "integrations"),
    ("checkpointing",),
    ("engines",),
    ("accelerator", "test_utils", "local_sgd"),
    # the kernel side: where events are shown (the base sink and the console, then the dashboard), and the launch
    ("display",),
    ("widgets",),
    ("launcher",),
    ("cli",),
    ("__init__",),
)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package (``widgets/`` as ``notebook_accel.widgets``) by dotted name."""
    found: dict[str, Path] = {}
    for base, package in ((root / "notebook_accel", "notebook_accel"), (root / "widgets", "notebook_accel.widgets")):
        for path in sorted(base.rglob("*.py")):
            if base.name == "notebook_accel" and path.relative_to(base).parts[0] == "widgets":
                continue  # a developer's symlink to widgets/ (see the helpers' worktrees): counted once, below
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The module an imported name lives in (``a.b.C`` -> ``a.b``), or ``None`` outside the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(known: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other modules of the package (lazy ones included, ``TYPE_CHECKING`` ones not)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                found = _resolve(target, known)
                if found is not None and found != name:
                    edges[name].add(found)
    return edges


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in (child, *_runtime_nodes(child)))
            continue
        yield node
        yield from _runtime_nodes(node)


def unit(name: str, known: Mapping[str, Path]) -> str:
    """The unit a module belongs to: its subpackage of ``notebook_accel``, ``widgets``, or itself."""
    parts = name.split(".")
    if len(parts) == 1:
        return "__init__"
    if len(parts) > 2 or known[name].name == "__init__.py":
        return parts[1]
    return parts[1]


def cycles(nodes: Iterable[str], edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def module_graph(known: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module imports, without those of a package's ``__init__`` (a facade that re-exports its own modules)."""
    edges = imports(known)
    return {name: {t for t in targets if known[t].name != "__init__.py" or unit(t, known) != unit(name, known)}
            for name, targets in edges.items()}


def unit_graph(known: Mapping[str, Path]) -> dict[str, set[tuple[str, str, str]]]:
    """Imports between units: ``unit -> {(other unit, importing module, imported module)}``."""
    graph: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for name, targets in imports(known).items():
        for target in targets:
            if target == "notebook_accel":
                continue  # the lazy public facade: reached only by users
            a, b = unit(name, known), unit(target, known)
            if a != b:
                graph[a].add((b, name, target))
    return graph


def layer_of(unit_name: str) -> int | None:
    """The index of the unit's layer in :data:`LAYERS` (``None``: not placed)."""
    for level, members in enumerate(LAYERS):
        if unit_name in members:
            return level
    return None


def upward_imports(known: Mapping[str, Path]) -> list[str]:
    """Imports from a unit to a unit of a higher layer, and units :data:`LAYERS` does not place."""
    problems = []
    graph = unit_graph(known)
    for name in sorted({unit(m, known) for m in known}):
        if layer_of(name) is None:
            problems.append(f"unit {name!r} is in no layer of tools/architecture.py's LAYERS")
    for a, links in sorted(graph.items()):
        for b, source, target in sorted(links):
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                problems.append(f"{source} (layer {la}: {a}) imports {target} (layer {lb}: {b})")
    return problems


PLACEMENTS = "notebook_accel.launcher.placement"
#: The folder under ``launcher/placement/`` that the placements share; any other folder there is one placement.
SHARED_PLACEMENT = "remote"


def placement_crossings(known: Mapping[str, Path]) -> list[str]:
    """Imports from one placement's folder (``launcher/placement/ray/``, ``.../slurm/``) into another's, or from the
    shared folder (:data:`SHARED_PLACEMENT`) into any placement's: what placements share lives in the shared one."""
    def folder(name: str) -> str | None:
        if not name.startswith(PLACEMENTS + "."):
            return None
        rest = name[len(PLACEMENTS) + 1:].split(".")
        return rest[0] if len(rest) > 1 or known[name].name == "__init__.py" else None

    problems = []
    for source, targets in sorted(imports(known).items()):
        here = folder(source)
        for target in sorted(targets):
            there = folder(target)
            if here is None or there is None or there == here or there == SHARED_PLACEMENT:
                continue
            problems.append(f"{source} (placement {here!r}) imports {target} (placement {there!r})")
    return problems


def sizes(known: Mapping[str, Path]) -> dict[str, int]:
    """Lines per module."""
    return {name: len(path.read_text().splitlines()) for name, path in known.items()}


def report(root: Path = ROOT) -> str:
    """The text ``python3 tools/architecture.py`` prints."""
    known = modules(root)
    lines = sizes(known)
    folders: dict[str, list[int]] = defaultdict(list)
    for name, path in known.items():
        folders[str(path.parent.relative_to(root))].append(lines[name])
    out = ["folder                                   modules  lines"]
    out += [f"{folder:<40} {len(counts):>7} {sum(counts):>6}" for folder, counts in sorted(folders.items())]
    largest = max(lines, key=lambda n: lines[n])
    module_cycles = cycles(sorted(known), module_graph(known))
    units = sorted({unit(m, known) for m in known})
    unit_cycles = cycles(units, {u: {b for b, _, _ in links} for u, links in unit_graph(known).items()})
    ignores = sum(p.read_text().count("type: ignore") for p in known.values())
    out += [
        f"modules: {len(known)}, lines: {sum(lines.values())}, largest: {largest} ({lines[largest]} lines), "
        f"over {MAX_LINES}: {[n for n in sorted(known) if lines[n] > MAX_LINES]}",
        f"import cycles between modules: {len(module_cycles)} {module_cycles or ''}",
        f"import cycles between units: {len(unit_cycles)} {unit_cycles or ''}",
        f"upward imports: {len(upward_imports(known))}",
        *(f"    {line}" for line in upward_imports(known)),
        f"type: ignore: {ignores}",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
