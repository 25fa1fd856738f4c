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
