"""The layers of DESIGN.md, read from the source with `ast`: imports run only downward, no import cycles, no
gradir module imported inside a function, no module importing the face `gradir`, no source file over 800 lines,
no `global` statement (options never travel through module globals).

    util <- core <- ops <- passes <- backends <- viz <- api <- eager <- training, frontends <- cli <- the face
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import networkx as nx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = {"gradir": "gradir", "gradir.passes": "passes", "gradir.backends": "backends", "gradir.viz": "viz"}
# a module's layer is its longest package prefix here; imports go to the same layer or one below
LAYERS = ["gradir.util", "gradir.core", "gradir.ops", "gradir.passes", "gradir.backends", "gradir.viz", "gradir.api",
          "gradir.eager", "gradir.training", "gradir.frontends", "gradir.cli", "gradir"]
MAX_LINES = 800
MAX_LOCAL_IMPORTS = 10  # of gradir modules inside functions (lazy imports are for optional third-party packages)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported gradir module
    line: int
    local: bool  # inside a function body
    type_only: bool  # under `if TYPE_CHECKING:`


def modules() -> dict[str, pathlib.Path]:
    """Every gradir module, by dotted name, and its file."""
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


def layer(module: str) -> int:
    """The index in LAYERS of the module's longest package prefix (the face `gradir` itself: the top)."""
    return max((i for i, p in enumerate(LAYERS) if module == p or module.startswith(p + ".")),
               key=lambda i: len(LAYERS[i]))


def imports(mods: dict[str, pathlib.Path]) -> list[Import]:
    """The imports of gradir modules in every gradir module (a `from p import m` of a submodule names m)."""
    found = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def visit(node, local, type_only):
            for child in ast.iter_child_nodes(node):
                in_function = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                guarded = type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        base = ".".join(package.split(".")[:len(package.split(".")) - child.level + 1] + [base]).rstrip(".")
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in child.names]
                else:
                    targets = []
                for target in targets:
                    if target == "gradir" or target.startswith("gradir."):
                        while target not in mods:
                            target = target.rpartition(".")[0]
                        found.append(Import(name, target, child.lineno, in_function, guarded))
                visit(child, in_function, guarded)

        visit(ast.parse(path.read_text()), False, False)
    return found


MODULES = modules()
IMPORTS = imports(MODULES)


def where(i: Import) -> str:
    return f"{MODULES[i.module].relative_to(REPO)}:{i.line} imports {i.target}"


def test_the_layer_map_covers_every_module():
    assert len(MODULES) > 80 and all(layer(m) >= 0 for m in MODULES)
    assert {layer(m) for m in MODULES} == set(range(len(LAYERS)))


def test_imports_run_downward():
    upward = [where(i) for i in IMPORTS if not i.type_only and layer(i.target) > layer(i.module)]
    assert upward == []


def test_no_module_imports_the_face():
    face = [where(i) for i in IMPORTS if i.target == "gradir" and i.module not in ("gradir", "gradir.__main__")]
    assert face == []


def test_no_import_cycles():
    graph = nx.DiGraph()
    for i in IMPORTS:
        if not i.type_only and i.module != i.target:
            graph.add_edge(i.module, i.target)
    cycles = [c for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


def test_few_function_local_imports():
    local = [where(i) for i in IMPORTS if i.local and not i.type_only]
    assert len(local) <= MAX_LOCAL_IMPORTS, "\n".join(local)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_file_over_800_lines(name):
    assert len(MODULES[name].read_text().splitlines()) <= MAX_LINES


def test_no_options_through_module_globals():
    """No `global` statement: options travel as arguments or objects (gr.compile's options ride on the graph it
    traces, gradir/api/options.py), not through module state one call sets and another reads."""
    found = [f"{MODULES[m].relative_to(REPO)}:{n.lineno}" for m in MODULES
             for n in ast.walk(ast.parse(MODULES[m].read_text())) if isinstance(n, ast.Global)]
    assert found == []


def test_every_package_says_what_it_may_import():
    packages = [m for m, p in MODULES.items() if p.name == "__init__.py" and m != "gradir"]
    missing = [m for m in packages if "import" not in (ast.get_docstring(ast.parse(MODULES[m].read_text())) or "")]
    assert missing == []


def test_the_layer_test_sees_a_planted_violation(tmp_path):
    """The reader itself: a function-local, upward import of the face is found as all three."""
    fake = {"gradir.core.fake": tmp_path / "fake.py", "gradir": REPO / "gradir" / "__init__.py"}
    fake["gradir.core.fake"].write_text("def f():\n    import gradir\n")
    found = [i for i in imports(fake) if i.module == "gradir.core.fake"]
    assert found == [Import("gradir.core.fake", "gradir", 2, True, False)]
    assert layer("gradir.core.fake") < layer("gradir")


def test_every_package_is_installed():
    """pyproject.toml lists every package (an editable install finds a missing one, a wheel does not)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert packages == listed
