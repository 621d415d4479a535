"""MkDocs hook: serve the generated API references (`make api-html`) under
api/rust/ (rustdoc) and api/node/ (TypeDoc).

They are added to the site's files rather than copied after the build, so
`mkdocs build --strict` checks the links docs/reference/api.md makes into them
like any other link: a missing reference fails the build.
"""

import os
import pathlib

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = ("rust", "node")


class Asset(File):
    """A file of a generated reference, copied as it is (rustdoc ships font
    licenses as .md files: not pages of this site)."""

    def is_documentation_page(self):
        return False


def on_files(files, config):
    src = pathlib.Path(os.environ.get("POLYLIMIT_API_HTML", ROOT / "target/api-html"))
    missing = [p for p in PARTS if not (src / "api" / p).is_dir()]
    if missing:
        raise PluginError(f"no API reference in {src}/api/{{{','.join(missing)}}}: run `make api-html` (or `make docs`)")
    for part in PARTS:
        for path in sorted((src / "api" / part).rglob("*")):
            if path.is_file():
                files.append(Asset(path.relative_to(src).as_posix(), str(src), config["site_dir"], False))
    return files
