#!/usr/bin/env python3
"""`make api-rust`: the core's rustdoc (the `polylimit` lib and its example
programs, core/examples: what `cargo doc --workspace --no-deps --examples`
documents) into OUT, from rust-build's own compile of them.

`cargo doc` compiles every dependency once more, in check mode (about 170 s of
CPU on a fresh clone), although rust-build has just built them all. rustdoc
needs only their libraries: tests/debug-libs.py keeps the rustc command line of
each workspace unit rust-build compiled (target/debug/rustc-args.json), and
this script turns those of the core's lib and examples into rustdoc's (the same
crate name, edition, cfgs, `--extern` libraries and search paths; cargo doc's
`--crate-version`; RUSTDOCFLAGS from the environment, make's `-D warnings`).
Where a command line is missing (a build from before this file existed, where
cargo found everything Fresh) or names a library no longer there, it says so
and runs `cargo doc` as before.

Usage: tests/rustdoc.py OUT
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

OUT = os.path.abspath(sys.argv[1])
TARGET = os.path.abspath(os.environ.get("CARGO_TARGET_DIR", "target"))
ARGS_FILE = os.path.join(TARGET, "debug", "rustc-args.json")
CARGO = os.environ.get("CARGO", "cargo")
PACKAGE = "polylimit"

# rustc options rustdoc takes as they are, and the ones it does not need.
KEEP = {"--crate-name", "--crate-type", "--edition", "--cfg", "--check-cfg", "-L", "--extern", "--cap-lints", "-D", "-W", "-A", "-F"}
DROP = {"--error-format", "--json", "--emit", "--out-dir", "--diagnostic-width", "-C"}
FLAGS_KEPT = set()
FLAGS_DROPPED = {"--test"}  # an example's test harness, documented as a bin


def fallback(reason):
    print(f"rustdoc.py: {reason}; running cargo doc instead", file=sys.stderr)
    subprocess.run([CARGO, "doc", "--workspace", "--no-deps", "--examples", "--quiet"], check=True)
    shutil.rmtree(OUT, ignore_errors=True)
    shutil.copytree(os.path.join(TARGET, "doc"), OUT)
    sys.exit(0)


def rustdoc_argv(unit, version):
    argv = unit["argv"]
    rustc = argv[1]  # argv[0] is clippy-driver (RUSTC_WORKSPACE_WRAPPER)
    rustdoc = os.path.join(os.path.dirname(rustc), "rustdoc")
    if not os.path.isfile(rustdoc):
        rustdoc = "rustdoc"
    out = [rustdoc]
    i = 2
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if not arg.startswith("-"):
            out.append(arg)  # the crate root
        elif name in KEEP or name in DROP:
            if not eq:
                i += 1
                value = argv[i]
            if name == "-C" and value.startswith("metadata="):
                out += ["-C", value]  # as cargo doc passes it
            elif name in KEEP:
                if name == "--extern" and "=" in value and not os.path.exists(value.split("=", 1)[1]):
                    fallback(f"{value.split('=', 1)[1]} is gone")
                out += [name, value]
        elif arg in FLAGS_KEPT:
            out.append(arg)
        elif arg not in FLAGS_DROPPED:
            sys.exit(f"rustdoc.py: rustc option {arg} unknown here (add it to KEEP or DROP)")
        i += 1
    return out + ["-o", OUT] + shlex.split(os.environ.get("RUSTDOCFLAGS", "")) + ["--crate-version", version]


def main():
    meta = json.loads(subprocess.run([CARGO, "metadata", "--no-deps", "--format-version", "1"], check=True, capture_output=True, text=True).stdout)
    package = next(p for p in meta["packages"] if p["name"] == PACKAGE)
    root = meta["workspace_root"]
    wanted = []  # (key in rustc-args.json, crate root relative to the workspace)
    for target in package["targets"]:
        src = os.path.relpath(target["src_path"], root)
        if target["kind"] == ["lib"]:
            wanted.insert(0, (f"{target['name']} lib", src))
        elif target["kind"] == ["example"]:
            # `cargo test --all-targets` compiles an example only as a test
            # harness: the same crates and cfgs, documented as the bin it is.
            wanted.append((f"{target['name']} test --test", src))
    try:
        with open(ARGS_FILE) as f:
            units = json.load(f)
    except (OSError, ValueError):
        fallback(f"no {ARGS_FILE} (rust-build found its units Fresh before it kept their command lines)")
    commands = []
    for key, src in wanted:
        unit = units.get(key)
        if unit is None or src not in unit["argv"]:
            fallback(f"no rustc command line of {key} ({src}) in {ARGS_FILE}")
        argv = rustdoc_argv(unit, package["version"])
        if "--test" in unit["argv"]:
            argv[1:1] = ["--crate-type", "bin"]
        commands.append((argv, unit["cwd"]))
    shutil.rmtree(OUT, ignore_errors=True)
    # make's jobserver descriptors are not passed on to this script's
    # children: rustdoc would warn that it cannot reach them.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "CARGO_MAKEFLAGS")}
    for argv, cwd in commands:
        rc = subprocess.run(argv, cwd=cwd, env=env).returncode
        if rc:
            print("rustdoc.py: failed: " + shlex.join(argv), file=sys.stderr)
            sys.exit(rc)


if __name__ == "__main__":
    main()
