#!/usr/bin/env python3
"""The API reference of every binding, read from the code's own doc comments.

For each language it lists the public items and the first line of each
one's doc comment, and writes them as content tabs into docs/reference/api.md:

    Python  the names of polylimit.__all__, in the .pyi stubs, and their
            public methods (docstrings)
    Node    every export of bindings-node/index.d.ts and the members of its
            exported classes (the /** ... */ comment before each)
    Go      every exported func, type and method of bindings-go (// comment)
    JVM     every public class, object, interface and fun of the hand-written
            Kotlin sources (KDoc); polylimit_jvm.kt is uniffi's output

Rust's reference is rustdoc and Node's is also TypeDoc (`make api-html`, served
under api/ of the site by tests/docs/api_html.py); `#![deny(missing_docs)]` in
core/src/lib.rs makes an undocumented public item a build error there.

    python3 tests/docs/api_reference.py          # rewrite docs/reference/api.md
    python3 tests/docs/api_reference.py --check  # fail on a public item with
                                                 # no doc comment or a stale page
"""

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/reference/api.md"


def first_line(text):
    """The first paragraph of a doc comment on one line, or "" when it has none."""
    paragraph = []
    for line in (text or "").strip().splitlines():
        if not line.strip():
            break
        paragraph.append(line.strip())
    return " ".join(paragraph)


# ---------------------------------------------------------------- Python
def python_items():
    pkg = ROOT / "bindings-python/python/polylimit"
    init = ast.parse((pkg / "__init__.py").read_text())
    exported = []
    for node in init.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            exported = [e.value for e in node.value.elts]
    defs, native = {}, {}
    for node in ast.parse((pkg / "_polylimit.pyi").read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            native[node.name] = defs[node.name] = node
    # What __init__.pyi defines wins; a subclass of a native class (`Limiter(_NativeLimiter)`)
    # also lists the native class's methods.
    for node in ast.parse((pkg / "__init__.pyi").read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defs[node.name] = node
    items = []
    for name in exported:
        if name == "__version__":
            items.append((name, "The version of the installed package, as a string."))
            continue
        node = defs.get(name)
        if node is None:
            items.append((name, ""))
            continue
        items.append((name, first_line(ast.get_docstring(node))))
        if isinstance(node, ast.ClassDef):
            members = list(node.body)
            if native.get(name) not in (None, node):
                own = {m.name for m in members if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                members += [m for m in native[name].body if getattr(m, "name", None) not in own]
            for member in members:
                # the constructor is the class's docstring
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and not member.name.startswith("_"):
                    doc = first_line(ast.get_docstring(member))
                    items.append((f"{name}.{member.name}", doc))
    return items


# ---------------------------------------------------------------- comments before a line
def doc_before(lines, i, style):
    """The doc comment ending right above lines[i] (skipping annotations)."""
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("@"):
        j -= 1
    if j < 0:
        return ""
    if style == "slash":
        block = []
        while j >= 0 and lines[j].strip().startswith("//"):
            block.insert(0, lines[j].strip()[2:].strip())
            j -= 1
        return first_line("\n".join(block))
    # /** ... */
    if not lines[j].strip().endswith("*/"):
        return ""
    block = []
    while j >= 0:
        block.insert(0, lines[j].strip())
        if lines[j].strip().startswith("/**"):
            break
        j -= 1
    text = "\n".join(block)
    text = re.sub(r"^/\*\*|\*/$", "", text.strip())
    text = "\n".join(l.strip().lstrip("*").strip() for l in text.splitlines())
    return first_line(text)


# ---------------------------------------------------------------- Node
def node_items():
    lines = (ROOT / "bindings-node/index.d.ts").read_text().splitlines()
    items = []
    cls = None
    decl = re.compile(r"^export (?:declare )?(?:abstract )?(class|interface|type|function|const|enum) (\w+)")
    member = re.compile(r"^  (?:static |readonly |get )*(\w+)\s*[(<:?]")
    for i, line in enumerate(lines):
        m = decl.match(line)
        if m:
            kind, name = m.groups()
            items.append((name, doc_before(lines, i, "jsdoc")))
            cls = name if kind == "class" and not line.rstrip().endswith("{}") else None
            continue
        if line.startswith("}"):
            cls = None
        elif cls:
            m = member.match(line)
            if m and not m.group(1).startswith("_"):
                items.append((f"{cls}.{m.group(1)}", doc_before(lines, i, "jsdoc")))
    return items


# ---------------------------------------------------------------- Go
def go_items():
    items = []
    decl = re.compile(r"^(?:func (?:\(\w+ \*?(\w+)\) )?([A-Z]\w*)|type ([A-Z]\w*))")
    for path in sorted((ROOT / "bindings-go").glob("*.go")):
        if path.name.endswith("_test.go"):
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = decl.match(line)
            if not m:
                continue
            recv, func, typ = m.groups()
            if recv and not recv[0].isupper():
                continue
            name = typ or (f"{recv}.{func}" if recv else func)
            items.append((name, doc_before(lines, i, "slash")))
    return sorted(items)


# ---------------------------------------------------------------- JVM
def generated_interfaces(lines):
    """{interface: {method: doc}} of uniffi's output, whose KDoc is the Rust doc comments."""
    out, iface = {}, None
    for i, line in enumerate(lines):
        m = re.match(r"^public interface (\w+)", line)
        if m:
            iface = out.setdefault(m.group(1), {})
        elif line.startswith("}"):
            iface = None
        elif iface is not None:
            m = re.match(r"^    (?:suspend )?fun `(\w+)`\(", line)
            if m:
                iface[m.group(1)] = doc_before(lines, i, "jsdoc")
    return out


def jvm_items():
    items = []
    src = ROOT / "bindings-jvm/src/main/kotlin/dev/polylimit"
    interfaces = generated_interfaces((src / "polylimit_jvm.kt").read_text().splitlines())
    top = re.compile(
        r"^(?:public )?(?:data |sealed |enum |abstract |open |fun )?(class|interface|object) (\w+)|^(?:public )?fun (?:<[^>]+> )?(?:([\w.]+)\.)?(\w+)\("
    )
    member = re.compile(r"^    (?:public )?(override )?(?:suspend )?fun (?:<[^>]+> )?(\w+)\(")
    for path in sorted(src.glob("*.kt")):
        if path.name == "polylimit_jvm.kt":
            continue
        lines = path.read_text().splitlines()
        cls, delegated = None, {}
        for i, line in enumerate(lines):
            m = top.match(line)
            if m:
                kind, name, recv, fun = m.groups()
                if name:
                    cls = name
                    items.append((name, doc_before(lines, i, "jsdoc")))
                    # `: FooInterface by native`: the generated methods are the class's too,
                    # documented where uniffi wrote them (overrides inherit that KDoc).
                    delegated = {}
                    for iface in re.findall(r"(\w+) by \w+", line):
                        delegated.update(interfaces.get(iface, {}))
                    for fun_name, doc in delegated.items():
                        items.append((f"{cls}.{fun_name}", doc))
                else:
                    cls = None
                    items.append((f"{recv}.{fun}" if recv else fun, doc_before(lines, i, "jsdoc")))
                continue
            if line.startswith(("private ", "internal ")):
                cls = None
                continue
            m = member.match(line)
            if cls and m:
                override, fun_name = m.groups()
                if override and fun_name in delegated:
                    continue  # listed with the interface's KDoc
                items.append((f"{cls}.{fun_name}", doc_before(lines, i, "jsdoc")))
    return items


LANGUAGES = [
    ("Python", "bindings-python/python/polylimit/*.pyi", python_items),
    ("Node.js", "bindings-node/index.d.ts", node_items),
    ("Go", "bindings-go/*.go", go_items),
    ("Kotlin / Java", "bindings-jvm/src/main/kotlin/dev/polylimit/*.kt", jvm_items),
]


def render(tables):
    out = [
        "<!-- Generated by tests/docs/api_reference.py from the doc comments; do not edit. -->",
        "# API reference",
        "",
        "Every public item of each binding with the first line of its doc comment, read from",
        "the sources (`make api-docs` rewrites this page; `make docs-test` fails when it is stale",
        "or when a public item has no doc comment). The full references:",
        "",
        "- **Rust core**: [rustdoc of the `polylimit` crate](../api/rust/polylimit/index.html); the",
        "  core denies an undocumented public item (`#![deny(missing_docs)]`).",
        "- **Node.js**: [TypeDoc of `index.d.ts`](../api/node/index.html); TypeDoc fails the",
        "  build on an undocumented export or class member (`tests/docs/typedoc.json`).",
        "- **Go**: `go doc -all` in `bindings-go`.",
        "- **Python**: `help(polylimit.Limiter)`; the stubs are `polylimit/*.pyi`.",
        "- **Kotlin / Java**: the KDoc of the sources, shown by your IDE.",
        "",
    ]
    for (title, source, _), items in zip(LANGUAGES, tables):
        out += [f'=== "{title}"', "", f"    From `{source}`.", "", "    | Item | Description |", "    |---|---|"]
        for name, doc in items:
            out.append(f"    | `{name}` | {doc.replace('|', '&#124;')} |")
        out.append("")
    return "\n".join(out)


def main():
    tables = [collect() for _, _, collect in LANGUAGES]
    missing = [f"{title}: {name}" for (title, _, _), items in zip(LANGUAGES, tables) for name, doc in items if not doc]
    page = render(tables)
    if "--check" in sys.argv:
        problems = [f"no doc comment: {m}" for m in missing]
        if not PAGE.exists() or PAGE.read_text() != page:
            problems.append(f"{PAGE.relative_to(ROOT)} is stale: run `python3 tests/docs/api_reference.py`")
        for p in problems:
            print(p, file=sys.stderr)
        sys.exit(1 if problems else 0)
    PAGE.write_text(page)
    for m in missing:
        print(f"no doc comment: {m}", file=sys.stderr)
    print(f"wrote {PAGE.relative_to(ROOT)}: " + ", ".join(f"{t[0]} {len(i)}" for t, i in zip(LANGUAGES, tables)))


if __name__ == "__main__":
    main()
