#!/usr/bin/env python3
"""The API reference of every binding, read from the code's own doc comments.

For each language it lists the public items and the first line of each
one's doc comment, and writes them as content tabs into docs/reference/api.md:

    Python  the names of __all__ of polylimit, polylimit.client and
            polylimit.fastapi and their classes' public members, read by griffe
            (the .pyi stubs merged with the sources; docstrings)
    Node    every export of bindings-node/index.d.ts and the members of its
            exported classes (the /** ... */ comment before each)
    Go      every exported const, var, func, type, method and struct field of
            bindings-go and bindings-go/client, read by go/doc (tests/docs/godoc.go)
    JVM     every public class, object, interface and fun of the hand-written
            Kotlin sources (KDoc); polylimit_jvm.kt is uniffi's output

Rust's reference is rustdoc and Node's is also TypeDoc (`make api-html`, served
under api/ of the site by tests/docs/api_html.py); `#![deny(missing_docs)]` in
core/src/lib.rs makes an undocumented public item a build error there.

    python3 tests/docs/api_reference.py          # rewrite docs/reference/api.md
    python3 tests/docs/api_reference.py --check  # fail on a public item with
                                                 # no doc comment or a stale page
"""

import json
import pathlib
import re
import subprocess
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
PYTHON_MODULES = [
    ("polylimit", ""),
    ("polylimit.client", "client."),
    ("polylimit.fastapi", "fastapi."),
    ("polylimit.django", "django."),
    ("polylimit.flask", "flask."),
    ("polylimit.grpc", "grpc."),
    ("polylimit.grpc.aio", "grpc.aio."),
    ("polylimit.otel", "otel."),
]


def python_items():
    """The names each module exports (``__all__``) and their classes' public members, as
    griffe reads them for the site's Python page (mkdocstrings): the .pyi stubs of the
    native module merged with the Python sources. The constructor is the class's docstring."""
    import griffe  # tests/docs/requirements.txt, in the checkout's .venv

    def docstring(obj):
        obj = obj.final_target if obj.is_alias else obj
        return first_line(obj.docstring.value if obj.docstring else "")

    items = []
    for module, prefix in PYTHON_MODULES:
        mod = griffe.load(module, search_paths=[ROOT / "bindings-python/python"], allow_inspection=False)
        for name in mod.exports if mod.exports is not None else mod.members:
            obj = mod.members[name]
            items.append((prefix + name, docstring(obj)))
            obj = obj.final_target if obj.is_alias else obj
            if obj.is_class:
                # all_members: a subclass of a native class (`Limiter(_NativeLimiter)`) lists its methods too
                for member, value in obj.all_members.items():
                    if not member.startswith("_"):
                        items.append((f"{prefix}{name}.{member}", docstring(value)))
    return items


# ---------------------------------------------------------------- comments before a line
def doc_before(lines, i):
    """The /** ... */ comment ending right above lines[i] (skipping annotations)."""
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("@"):
        j -= 1
    if j < 0:
        return ""
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
            items.append((name, doc_before(lines, i)))
            cls = name if kind == "class" and not line.rstrip().endswith("{}") else None
            continue
        if line.startswith("}"):
            cls = None
        elif cls:
            m = member.match(line)
            if m and not m.group(1).startswith("_"):
                items.append((f"{cls}.{m.group(1)}", doc_before(lines, i)))
    return items


# ---------------------------------------------------------------- Go
GO_PACKAGES = ["bindings-go", "bindings-go/client", "bindings-go/ginlimit", "bindings-go/echolimit", "bindings-go/grpclimit", "bindings-go/otellimit"]


def go_items():
    """Every exported const, var, func, type, method and struct field, as go/doc
    reads them (tests/docs/godoc.go), with the first sentence of its comment."""
    out = subprocess.run(
        ["go", "run", "tests/docs/godoc.go", *GO_PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [(i["name"], i["doc"]) for i in map(json.loads, out.splitlines())]


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
                iface[m.group(1)] = doc_before(lines, i)
    return out


def jvm_items():
    items = []
    src = ROOT / "bindings-jvm/src/main/kotlin/dev/polylimit"
    interfaces = generated_interfaces((src / "polylimit_jvm.kt").read_text().splitlines())
    top = re.compile(
        r"^(?:public )?(?:data |sealed |enum |abstract |open |fun )?(class|interface|object) (\w+)|^(?:public )?fun (?:<[^>]+> )?(?:([\w.]+)\.)?(\w+)\("
    )
    # a class's funs, and its companion object's (8 spaces)
    member = re.compile(r"^    (?:    )?(?:public )?(override )?(?:suspend )?fun (?:<[^>]+> )?(\w+)\(")
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
                    items.append((name, doc_before(lines, i)))
                    # `: FooInterface by native`: the generated methods are the class's too,
                    # documented where uniffi wrote them (overrides inherit that KDoc).
                    delegated = {}
                    for iface in re.findall(r"(\w+) by \w+", line):
                        delegated.update(interfaces.get(iface, {}))
                    for fun_name, doc in delegated.items():
                        items.append((f"{cls}.{fun_name}", doc))
                else:
                    cls = None
                    items.append((f"{recv}.{fun}" if recv else fun, doc_before(lines, i)))
                continue
            if line.startswith(("private ", "internal ")):
                cls = None
                continue
            m = member.match(line)
            if cls and m:
                override, fun_name = m.groups()
                if override and fun_name in delegated:
                    continue  # listed with the interface's KDoc
                items.append((f"{cls}.{fun_name}", doc_before(lines, i)))
    return items


LANGUAGES = [
    ("Python", "bindings-python/python/polylimit/*.pyi, *.py", python_items),
    ("Node.js", "bindings-node/index.d.ts", node_items),
    ("Go", "bindings-go/*.go, bindings-go/client/*.go", go_items),
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
        "- **Python**: [Python API](python.md), mkdocstrings' page of the `.pyi` stubs and the",
        "  sources; the check below covers every name it shows.",
        "- **Node.js**: [TypeDoc of `index.d.ts`](../api/node/index.html); TypeDoc fails the build",
        "  on an undocumented export, class member or interface property (`tests/docs/typedoc.json`).",
        "- **Go**: [Go API](go.md), `go doc -all` of the module; the check below reads every",
        "  exported const, var, func, type, method and struct field with go/doc.",
        "- **Kotlin / Java**: [Dokka of the Kotlin sources](../api/jvm/index.html); the check below",
        "  reads the KDoc of every public declaration of the hand-written sources.",
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
