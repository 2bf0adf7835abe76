"""The package's import graph, read from the source with `ast` (nothing is imported): which module imports which, at
module top, inside a function, or only under `if TYPE_CHECKING:`, and which private names (`_x`) cross a folder.

`tests/test_layering.py` asserts on it; `python tests/import_graph.py` prints what it finds (circles, arrows up into
`training/`, private names across folders), each with file:line.

A *unit* is what the folder-level graph joins: a top-level folder (`circuits/`, with everything under it) or a
top-level module (`model.py`), since the top-level modules are the core the folders stand on. The package root
(`__init__.py`, the lazy facade that names everything) is left out: it imports nothing at runtime.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "PrivateUse", "folder", "imports", "module_names", "private_uses", "strongly_connected", "unit"]

PACKAGE_NAME = "hf_heuristic_core"


@dataclass(frozen=True)
class Import:
    """One import statement's arrow from `source` to `target` (module names relative to the package, a package by
    its own name); `kind` is "top", "function" or "type_checking"."""
    source: str
    target: str
    names: tuple[str, ...]
    file: str
    line: int
    kind: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def runtime(self) -> bool:
        return self.kind != "type_checking"


@dataclass(frozen=True)
class PrivateUse:
    """A private name `name` of `owner`'s folder used in `file:line` of another folder (`how`: "import" or
    "attribute")."""
    name: str
    file: str
    line: int
    how: str
    owner: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit(module: str, modules: set[str]) -> str:
    """`circuits/` for anything under `circuits`, `model.py` for the top-level module `model`."""
    head = module.split(".")[0]
    is_package = module == "" or any(other.startswith(module + ".") for other in modules)
    return f"{head}.py" if head == module and not is_package else f"{head}/"


def folder(file: str) -> str:
    """The top-level folder a file (relative to the package) lies in; "" for the top-level modules."""
    parts = file.split("/")
    return parts[0] if len(parts) > 1 else ""


def module_names(package: Path) -> set[str]:
    """Every module of the package by its dotted name relative to the package (a package by its own name)."""
    return set(_modules(package))


def _modules(package: Path) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts}


@dataclass(frozen=True)
class _Facts:
    """What the scans need of one file: its import statements (with where they run), the private names it defines
    (a def, class, module or class assignment, `self._x = `) and the private attributes it reads or writes on
    anything but `self` / `cls` (name, line)."""
    imports: tuple[tuple[ast.ImportFrom | ast.Import, str], ...]
    defines: frozenset[str]
    attributes: tuple[tuple[str, int], ...]


@functools.lru_cache(maxsize=None)
def _scan(path: Path, stamp: tuple[int, int]) -> _Facts:
    found_imports, defines, attributes = [], set(), []
    for node, kind in _walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, (ast.ImportFrom, ast.Import)):
            found_imports.append((node, kind))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defines.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        defines.add(leaf.id)
                    elif isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) \
                            and leaf.value.id in ("self", "cls"):
                        defines.add(leaf.attr)
        if isinstance(node, ast.Attribute) and _private(node.attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            attributes.append((node.attr, node.lineno))
    return _Facts(tuple(found_imports), frozenset(n for n in defines if _private(n)), tuple(attributes))


def _facts(path: Path) -> _Facts:
    """The file's facts, scanned once per version of the file (the tests ask several times)."""
    stat = path.stat()
    return _scan(path, (stat.st_mtime_ns, stat.st_size))


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node with where it runs: "top", "function" (inside a def or lambda) or "type_checking"."""
    stack: list[tuple[ast.AST, str]] = [(tree, "top")]
    while stack:
        node, kind = stack.pop()
        yield node, kind
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack += [(child, "type_checking") for child in node.body]
            stack += [(child, kind) for child in node.orelse]
            continue
        inner = "function" if kind == "top" and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else kind
        stack += [(child, inner) for child in ast.iter_child_nodes(node)]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _package_of(module: str, path: Path) -> list[str]:
    parts = module.split(".") if module else []
    return parts if path.name == "__init__.py" else parts[:-1]


def imports(package: Path) -> list[Import]:
    """Every import of one package module by another, with the module that runs it."""
    modules = _modules(package)
    found = []
    for source, path in modules.items():
        file = path.relative_to(package).as_posix()
        for node, kind in _facts(path).imports:
            targets: list[tuple[str, tuple[str, ...]]] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = _package_of(source, path)
                    if node.level - 1 > len(base):
                        continue
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                elif node.module == PACKAGE_NAME or (node.module or "").startswith(PACKAGE_NAME + "."):
                    target = node.module.removeprefix(PACKAGE_NAME).lstrip(".")
                else:
                    continue
                plain = []
                for alias in node.names:
                    sub = f"{target}.{alias.name}".strip(".")
                    if sub in modules:
                        targets.append((sub, ()))
                    else:
                        plain.append(alias.name)
                if plain:
                    targets.append((target, tuple(plain)))
            elif isinstance(node, ast.Import):
                targets += [(a.name.removeprefix(PACKAGE_NAME).lstrip("."), ()) for a in node.names
                            if a.name == PACKAGE_NAME or a.name.startswith(PACKAGE_NAME + ".")]
            for target, names in targets:
                if target not in modules:
                    raise ValueError(f"{file}:{node.lineno} imports {target!r}, which is not a module of the package")
                ancestor = source == target or source.startswith(target + ".") or target == ""
                if not ancestor:
                    found.append(Import(source, target, names, file, node.lineno, kind))
    return found


def strongly_connected(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The circles of a directed graph: its strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_definitions(package: Path) -> dict[str, set[str]]:
    """Private name -> the folders that define it."""
    owners: dict[str, set[str]] = {}
    for path in _modules(package).values():
        for name in _facts(path).defines:
            owners.setdefault(name, set()).add(folder(path.relative_to(package).as_posix()))
    return owners


def private_uses(package: Path) -> list[PrivateUse]:
    """Private names that cross a folder: imported from another folder's module, or read or written as an attribute
    (`model._state`) where only another folder of the package defines that name."""
    modules = _modules(package)
    owners = _private_definitions(package)
    found = []
    for edge in imports(package):
        owner = folder(modules[edge.target].relative_to(package).as_posix())
        if owner != folder(edge.file):
            found += [PrivateUse(n, edge.file, edge.line, "import", owner) for n in edge.names if _private(n)]
    for path in modules.values():
        file = path.relative_to(package).as_posix()
        here = folder(file)
        for name, line in _facts(path).attributes:
            folders = owners.get(name, set())
            if folders and here not in folders:
                found.append(PrivateUse(name, file, line, "attribute", "/".join(sorted(folders))))
    return sorted(found, key=lambda u: (u.file, u.line, u.name))


def _report(package: Path) -> None:
    edges = imports(package)
    modules = set(_modules(package))
    runtime = [e for e in edges if e.runtime]
    print("module circles (runtime imports: module top and inside functions):")
    for component in strongly_connected((e.source, e.target) for e in runtime):
        print("  ", " <-> ".join(component))
        for e in runtime:
            if e.source in component and e.target in component:
                print(f"      {e.where} ({e.kind}) {e.source} -> {e.target}")
    extra = [c for c in strongly_connected((e.source, e.target) for e in edges)
             if c not in strongly_connected((e.source, e.target) for e in runtime)]
    print("module circles closed only by TYPE_CHECKING imports (not a runtime circle):", extra or "none")
    print("folder circles (runtime):")
    cross = [e for e in runtime if unit(e.source, modules) != unit(e.target, modules)]
    for component in strongly_connected((unit(e.source, modules), unit(e.target, modules)) for e in cross):
        print("  ", " <-> ".join(component))
        for e in cross:
            if unit(e.source, modules) in component and unit(e.target, modules) in component:
                print(f"      {e.where} ({e.kind}) {e.source} -> {e.target}")
    print("imports of training/ from outside it:")
    for e in runtime:
        if e.target.split(".")[0] == "training" and e.source.split(".")[0] != "training":
            print(f"   {e.where} ({e.kind}) {e.source} -> {e.target}")
    print("private names across folders:")
    for use in private_uses(package):
        print(f"   {use.where} {use.how} {use.name} (defined in {use.owner or 'top level'})")


if __name__ == "__main__":
    import sys

    _report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / PACKAGE_NAME)
