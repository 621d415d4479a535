"""The stubs and py.typed ship with the package and describe every public name."""

from __future__ import annotations

import ast
from pathlib import Path

import polylimit
import polylimit._polylimit as native

PKG = Path(polylimit.__file__).parent


def stub_names(path: Path) -> set:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_py_typed_and_stubs_ship() -> None:
    assert (PKG / "py.typed").exists()
    assert (PKG / "__init__.pyi").exists() and (PKG / "_polylimit.pyi").exists()


def test_every_public_name_is_stubbed() -> None:
    stubs = stub_names(PKG / "__init__.pyi")
    assert set(polylimit.__all__) <= stubs, set(polylimit.__all__) - stubs
    native_public = {n for n in dir(native) if not n.startswith("_")} | {"__version__"}
    native_stubs = stub_names(PKG / "_polylimit.pyi")
    assert native_public <= native_stubs, native_public - native_stubs


def test_stubbed_methods_exist() -> None:
    tree = ast.parse((PKG / "_polylimit.pyi").read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(native, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("__"):
                    assert hasattr(cls, item.name), f"{node.name}.{item.name}"
