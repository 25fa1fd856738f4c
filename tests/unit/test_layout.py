"""The layout shows the flow: stages import `common` (and the image names), never each
other, and `common` imports no stage."""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "components")
STAGES = ["data_validation", "training", "evaluation", "watermark", "deploy", "release"]
PACKAGE = "kfp_llmops.components"


def _imports(path: str, package: str) -> set[str]:
    """Every kfp_llmops.components.* module a file imports, absolute or relative, anywhere in it."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith(PACKAGE + ".")}


def _owner(module: str) -> str:
    return module[len(PACKAGE) + 1 :].split(".")[0]


def _files(folder: str):
    for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                package = f"{PACKAGE}.{rel}" if name == "__init__.py" else f"{PACKAGE}.{rel.rsplit('.', 1)[0]}"
                yield path, package.removesuffix(".__init__")


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_imports_only_common_and_itself(stage):
    wrong = {
        (os.path.relpath(path, ROOT), module)
        for path, package in _files(stage)
        for module in _imports(path, package)
        if _owner(module) not in ("common", "images", "__version__", stage)
    }
    assert not wrong, f"{stage} imports other stages: {sorted(wrong)}"


def test_common_imports_no_stage():
    wrong = {
        (os.path.relpath(path, ROOT), module)
        for path, package in _files("common")
        for module in _imports(path, package)
        if _owner(module) in STAGES
    }
    assert not wrong, sorted(wrong)


def test_the_checker_sees_relative_and_nested_imports(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from ..training.data import read_pairs\nfrom . import x\n")
    found = _imports(str(path), f"{PACKAGE}.evaluation")
    assert f"{PACKAGE}.training.data" in found and f"{PACKAGE}.evaluation" in found


MAX_FUNCTION_LINES = 80
REPO = os.path.dirname(ROOT)


def _long_functions(folder: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method in `folder`'s Python files longer than `limit` lines
    (signature, docstring and body), as path:line name (lines)."""
    found = []
    for dirpath, _, names in os.walk(folder):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        found.append(f"{os.path.relpath(path, REPO)}:{node.lineno} {node.name} ({lines})")
    return found


@pytest.mark.parametrize("folder", ["components", "pipelines"])
def test_no_function_is_longer_than_80_lines(folder):
    """A function that long is several steps; each gets a name (ruff's C901, PLR0913 and
    PLR0915 in `make lint` guard complexity, arguments and statements)."""
    assert not _long_functions(os.path.join(REPO, folder)), _long_functions(os.path.join(REPO, folder))


def test_the_size_check_sees_long_functions_and_methods(tmp_path):
    fits = "def fits():\n" + "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    long = "class C:\n    def long(self):\n" + "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(fits + "\n\n" + long)
    found = _long_functions(str(tmp_path))
    assert len(found) == 1 and found[0].endswith(f" long ({MAX_FUNCTION_LINES + 1})"), found


def _cycles(stage: str) -> list[list[str]]:
    """Import circles among a stage's modules (imports inside functions count: a circle
    hidden in a function is still one), each as the modules around it."""
    modules = {os.path.splitext(n)[0] for n in os.listdir(os.path.join(ROOT, stage)) if n.endswith(".py")}
    modules.discard("__init__")
    prefix = f"{PACKAGE}.{stage}."
    graph = {m: set() for m in modules}
    for path, package in _files(stage):
        name = os.path.splitext(os.path.basename(path))[0]
        if name not in graph:
            continue
        for module in _imports(path, package):
            if module.startswith(prefix):
                target = module[len(prefix) :].split(".")[0]
                if target in modules and target != name:
                    graph[name].add(target)
    found, done = [], set()

    def visit(node, trail):
        if node in trail:
            found.append(trail[trail.index(node) :] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, trail + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return found


@pytest.mark.parametrize("stage", STAGES + ["common"])
def test_no_import_circle_inside_a_stage(stage):
    """Each module of a stage sits above the ones it imports: the engines above the
    validator, the validator above its parts (a module importing back private names from
    one that imports it is how circles start)."""
    assert not _cycles(stage), _cycles(stage)


def test_the_circle_check_sees_a_circle_through_a_function(tmp_path, monkeypatch):
    stage = tmp_path / "components" / "s"
    stage.mkdir(parents=True)
    (stage / "__init__.py").write_text("")
    (stage / "a.py").write_text("from .b import x\n")
    (stage / "b.py").write_text("def f():\n    from . import c\n")
    (stage / "c.py").write_text("from kfp_llmops.components.s.a import y\n")
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path / "components"))
    assert _cycles("s") == [["a", "b", "c", "a"]]


def test_no_module_reads_the_standard_library_s_private_modules():
    """The package runs on the Python versions it declares, not on one CPython's internals
    (`re._parser`, `re._constants`: what regex_program.py read before it parsed patterns
    itself). Names imported from a private module count too."""
    import sys

    roots = [ROOT, os.path.join(os.path.dirname(ROOT), "pipelines")]
    wrong = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(dirpath, name)
                for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
                    if isinstance(node, ast.Import):
                        modules = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                        modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                    else:
                        continue
                    for module in modules:
                        parts = module.split(".")
                        if parts[0] in sys.stdlib_module_names and any(p.startswith("_") for p in parts[1:2]):
                            if module != "os._exit":
                                wrong.append((os.path.relpath(path, os.path.dirname(ROOT)), module))
    assert not wrong, f"private standard-library modules imported: {sorted(set(wrong))}"
