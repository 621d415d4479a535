"""MkDocs hook: the generated API references in the site.

- api/rust/ (rustdoc), api/node/ (TypeDoc) and api/jvm/ (Dokka), built by
  `make api-html`, are
  added to the site's files rather than copied after the build, so
  `mkdocs build --strict` checks the links docs/reference/api.md makes into
  them like any other link: a missing reference fails the build.
- reference/go.md is `go doc -all` of each Go package, generated here at every
  build (Go's own reference generator; the module is not on pkg.go.dev yet).
"""

import os
import pathlib
import subprocess

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = ("rust", "node", "jvm")
GO_PACKAGES = [".", "./client"]  # in bindings-go


class Asset(File):
    """A file of a generated reference, copied as it is (rustdoc ships font
    licenses as .md files: not pages of this site)."""

    def is_documentation_page(self):
        return False


def go_page():
    out = [
        "# Go API",
        "",
        "`go doc -all` of the module `github.com/polylimit/polylimit/bindings-go`, generated at",
        "every build of the site from the doc comments (`make docs-test` fails on an exported",
        "identifier without one: `tests/docs/godoc.go`). The same text in a checkout:",
        "`cd bindings-go && go doc -all .`",
        "",
    ]
    for package in GO_PACKAGES:
        try:
            text = subprocess.run(
                ["go", "doc", "-all", package], cwd=ROOT / "bindings-go", capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise PluginError(f"`go doc -all {package}` in bindings-go failed (Go >= 1.23 is needed): {e}")
        out += [f"## {text.splitlines()[0].split(' // ')[0]}", "", "```go", text.rstrip(), "```", ""]
    return "\n".join(out)


def on_files(files, config):
    src = pathlib.Path(os.environ.get("POLYLIMIT_API_HTML", ROOT / "target/api-html"))
    missing = [p for p in PARTS if not (src / "api" / p).is_dir()]
    if missing:
        raise PluginError(f"no API reference in {src}/api/{{{','.join(missing)}}}: run `make api-html` (or `make docs`)")
    for part in PARTS:
        for path in sorted((src / "api" / part).rglob("*")):
            if path.is_file():
                files.append(Asset(path.relative_to(src).as_posix(), str(src), config["site_dir"], False))
    files.append(File.generated(config, "reference/go.md", content=go_page()))
    return files
