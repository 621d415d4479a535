"""Writes the Go module as a module proxy serves a tagged release: <module>/@v/{list,.info,.mod,.zip}.

The zip holds the package's Go files, the client package's (client/, which calls the same core for
the Retry-After rules), the C header and, per platform, the prebuilt static library in
build/<goos>-<goarch>/ (as wasmtime-go ships its own), each directory with a Go file of its own so
`go mod vendor` keeps it. A generated link.go in each package replaces the checkout's link_debug.go /
link_release.go, which point cgo at cargo's target directory. Each framework adapter (ginlimit,
echolimit, grpclimit) and the OpenTelemetry bridge (otellimit) is a module of its own, released beside it at the same version: its Go files
and its go.mod, which requires this module's release instead of replacing it by the checkout's.
Standard library only.

    python3 dist.py --version 0.1.0 --out dist/goproxy --lib linux-amd64=path/to/libpolylimit_capi.a ...
"""

import argparse
import json
import re
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODULE = "github.com/polylimit/polylimit/bindings-go"
LIB = "libpolylimit_capi.a"
NATIVE_LIBS = "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
# The checkout's cgo link files: they name cargo's target directory, which a user does not have.
CHECKOUT_ONLY = {"link_debug.go", "link_release.go"}
# The framework adapters: module directory -> the files a release of it must hold.
ADAPTERS = {"ginlimit": "ginlimit.go", "echolimit": "echolimit.go", "grpclimit": "grpclimit.go", "otellimit": "otellimit.go"}


def package_dir(platform: str) -> str:
    return "build/" + platform


def link_go(platforms, package: str = "polylimit", root: str = "") -> str:
    """The cgo link file of `package`, which sits `root` ("../" per level) below the module's root."""
    goos_arch = [p.split("-", 1) for p in platforms]
    ldflags = "\n".join(f"#cgo {goos},{arch} LDFLAGS: ${{SRCDIR}}/{root}build/{goos}-{arch}/{LIB} {NATIVE_LIBS}"
                        for goos, arch in goos_arch)
    imports = "\n".join(f'\t_ "{MODULE}/build/{goos}-{arch}"' for goos, arch in goos_arch)
    return f"""package {package}

// The prebuilt core for each platform this release ships, in build/<goos>-<goarch>/.
// Imported so that `go mod vendor` keeps those directories and the header's.

/*
{ldflags}
*/
import "C"

import (
\t_ "{MODULE}/capi/include"
{imports}
)
"""


# The binding's internal packages of pure Go (internal/adaptertest is the adapters' tests' only).
PURE_GO = ("internal/sansio/",)


def keep_dir_go(package: str, what: str) -> str:
    return f"// Package {package} holds {what}; it has no Go code.\npackage {package}\n"


def module_files(platforms: dict) -> dict:
    """Path in the module -> bytes."""
    files = {}
    for package, at, root in (("polylimit", "", ""), ("client", "client/", "../")):
        for src in sorted((HERE / at).glob("*.go")):
            if src.name.endswith("_test.go") or src.name in CHECKOUT_ONLY:
                continue
            files[at + src.name] = src.read_bytes()
        files[at + "link.go"] = link_go(sorted(platforms), package, root).encode()
    # Packages of pure Go the binding imports (no cgo, so no link.go).
    for at in PURE_GO:
        for src in sorted((HERE / at).glob("*.go")):
            if not src.name.endswith("_test.go"):
                files[at + src.name] = src.read_bytes()
    files["go.mod"] = (HERE / "go.mod").read_bytes()
    files["README.md"] = (HERE / "README.md").read_bytes()
    files["LICENSE"] = (ROOT / "LICENSE").read_bytes()
    files["capi/include/polylimit.h"] = (HERE / "capi" / "include" / "polylimit.h").read_bytes()
    files["capi/include/include.go"] = keep_dir_go("include", "the C header of the polylimit core").encode()
    for platform, lib in sorted(platforms.items()):
        goos, arch = platform.split("-", 1)
        files[f"build/{platform}/{LIB}"] = Path(lib).read_bytes()
        package = f"{goos}{arch}"
        files[f"build/{platform}/lib.go"] = keep_dir_go(package, f"the polylimit core for {goos}/{arch}").encode()
    return files


def commit_time() -> str:
    """The release's time: the commit's, so two builds of one commit write the same .info."""
    done = subprocess.run(["git", "log", "-1", "--format=%cI"], cwd=ROOT, capture_output=True, text=True)
    when = datetime.fromisoformat(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() \
        else datetime.now(timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def check(files: dict, platforms: dict) -> None:
    """Only what a user builds with: no tests, Rust sources, benchmarks or cargo output."""
    for name in files:
        ok = (("/" not in name and (name.endswith(".go") or name in ("go.mod", "README.md", "LICENSE")))
              or (name.startswith("client/") and name.count("/") == 1 and name.endswith(".go"))
              or any(name.startswith(at) and name.count("/") == at.count("/") and name.endswith(".go") for at in PURE_GO)
              or name in ("capi/include/polylimit.h", "capi/include/include.go")
              or any(name in (f"build/{p}/{LIB}", f"build/{p}/lib.go") for p in platforms))
        if not ok or name.endswith("_test.go") or name in CHECKOUT_ONLY:
            sys.exit(f"go dist: unexpected file in the module zip: {name}")
    for needed in ("go.mod", "LICENSE", "link.go", "limiter.go", "version.go", "capi/include/polylimit.h",
                   "client/client.go", "client/link.go", "internal/sansio/sansio.go"):
        if needed not in files:
            sys.exit(f"go dist: {needed} is missing from the module zip")


def adapter_files(name: str, version: str) -> dict:
    """The module of the adapter in bindings-go/<name>: path in the module -> bytes."""
    at = HERE / name
    files = {src.name: src.read_bytes() for src in sorted(at.glob("*.go")) if not src.name.endswith("_test.go")}
    mod = (at / "go.mod").read_text()
    # The checkout's replace block (its comment and every line up to the closing parenthesis, or one line).
    released = re.sub(r"\n(//[^\n]*\n)*replace (\([^)]*\)|[^\n]*)\n", "\n", mod)
    released = released.replace(f"{MODULE} v0.0.0", f"{MODULE} {version}")
    if "replace" in released or f"{MODULE} {version}" not in released or not released.startswith(f"module {MODULE}/{name}\n"):
        sys.exit(f"go dist: {name}/go.mod does not read as expected:\n{released}")
    files["go.mod"] = released.encode()
    files["LICENSE"] = (ROOT / "LICENSE").read_bytes()
    if ADAPTERS[name] not in files:
        sys.exit(f"go dist: {ADAPTERS[name]} is missing from {name}")
    return files


def publish(out: Path, module: str, version: str, files: dict, when: str) -> None:
    """Writes <out>/<module>/@v/ as a module proxy serves the tagged release `version`."""
    at = out / module / "@v"
    at.mkdir(parents=True, exist_ok=True)
    for old in at.iterdir():
        old.unlink()
    stamp = tuple(int(x) for x in (when[0:4], when[5:7], when[8:10], when[11:13], when[14:16], when[17:19]))
    with zipfile.ZipFile(at / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in sorted(files.items()):
            z.writestr(zipfile.ZipInfo(f"{module}@{version}/{name}", date_time=stamp), data,
                       compress_type=zipfile.ZIP_DEFLATED)
    (at / f"{version}.mod").write_bytes(files["go.mod"])
    (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": when}) + "\n")
    (at / "list").write_text(version + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--lib", action="append", required=True, help="<goos>-<goarch>=<static library>")
    args = parser.parse_args()
    platforms = dict(item.split("=", 1) for item in args.lib)
    version = "v" + args.version
    files = module_files(platforms)
    check(files, platforms)

    when = commit_time()
    publish(args.out, MODULE, version, files, when)
    for name in ADAPTERS:
        publish(args.out, f"{MODULE}/{name}", version, adapter_files(name, version), when)
    at = args.out / MODULE / "@v"
    size = (at / f"{version}.zip").stat().st_size
    libs = ", ".join(f"{p}: {len(files[f'build/{p}/{LIB}']) / 1e6:.1f} MB" for p in sorted(platforms))
    print(f"  {at / (version + '.zip')}  {size / 1e6:.1f} MB ({len(files)} files; static libraries {libs});"
          f" the adapters {', '.join(ADAPTERS)} beside it")


if __name__ == "__main__":
    main()
