"""No import cycle between hf_aux's modules (issue #19 item 9): every `import` of one hf_aux module by another,
at module level or inside a function, read from the source; the package root (`from .. import __version__`) and
`if TYPE_CHECKING:` blocks (the lazy namespace's list for type checkers) do not count."""

import ast
from pathlib import Path

import hf_aux

ROOT = Path(hf_aux.__file__).parent


def module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_modules(name: str, path: Path, known: dict) -> set[str]:
    """The hf_aux modules that module `name` imports, anywhere in its source but under `if TYPE_CHECKING:`."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(node) for top in ast.walk(tree) if isinstance(top, ast.If)
               and getattr(top.test, "id", None) == "TYPE_CHECKING" for node in ast.walk(top)}
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = ".".join((package[:len(package) - node.level + 1] if node.level else [])
                            + ([node.module] if node.module else []))
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate not in (name, "hf_aux"):
                targets.add(candidate)
    return targets


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path a -> ... -> a, or None."""
    state, trail = {}, []

    def visit(node):
        state[node] = "open"
        trail.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        trail.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_hf_aux_has_no_import_cycle():
    known = module_names()
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    # reads both ways
    assert "hf_aux.tasks.spec" in graph["hf_aux.tasks.demo"] and "hf_aux.tasks.demo" in graph["hf_aux.tasks.loading"]
    assert find_cycle(graph) is None
