#!/usr/bin/env python3
"""Reads `cargo test --no-run --verbose --message-format=json-render-diagnostics
2>&1` on stdin (make rust-build) and

- hard-links the workspace's static and shared libraries it built (the C
  ABI's libpolylimit_capi.a, the JVM's libpolylimit_jvm.so, …) to
  target/debug/, where `cargo build` would put them: the bindings' suites link
  the libraries of the tests' own build. (A `cargo build` puts them there too,
  but for the cdylibs it is another unit writing the same file, so each
  switch rebuilds it.)
- keeps the rustc command line of each workspace unit cargo compiled (its
  `Running` line) in target/debug/rustc-args.json, merged with the earlier
  ones (a Fresh unit prints none): tests/rustdoc.py documents the core and its
  examples from them against this build's libraries, so `make api-rust`
  compiles no dependency a second time (`cargo doc` checks every one).
- prints the rest of cargo's stderr (the diagnostics come rendered in the
  JSON) and drops its status lines.
"""

import json
import os
import re
import shlex
import sys

out = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "debug")
ARGS_FILE = os.path.join(out, "rustc-args.json")
STATUS = re.compile(r"^\s*(Compiling|Fresh|Running|Dirty|Finished|Executable|Checking|Blocking|Locking|Adding|Updating|Downloading|Downloaded|Building)\b")


def workspace_unit(argv):
    """The key of a workspace unit's rustc command (None for a dependency's or
    a build script's): crate name, crate type, test harness or not."""
    if not argv or not argv[0].endswith("clippy-driver"):  # RUSTC_WORKSPACE_WRAPPER: members only
        return None
    name = argv[argv.index("--crate-name") + 1] if "--crate-name" in argv else None
    kinds = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--crate-type"]
    if name is None or name.startswith("build_script_"):
        return None
    return f"{name} {','.join(kinds) or 'test'}{' --test' if '--test' in argv else ''}"


commands = {}
for text in sys.stdin:
    if not text.startswith("{"):
        match = re.match(r"^\s*Running `(.*)`\s*$", text)
        if match:
            try:
                argv = shlex.split(match.group(1))
            except ValueError:
                continue
            key = workspace_unit(argv)
            if key:
                commands[key] = {"argv": argv, "cwd": os.getcwd()}
        elif not STATUS.match(text):
            sys.stderr.write(text)
        continue
    message = json.loads(text)
    if message.get("reason") == "compiler-message":
        sys.stderr.write(message["message"].get("rendered") or "")
    elif message.get("reason") == "compiler-artifact" and message["package_id"].startswith("path+file://"):
        if message["profile"]["test"]:
            continue
        for path in message["filenames"]:
            if path.endswith((".a", ".so")):
                link = os.path.join(out, re.sub(r"-[0-9a-f]{16}(\.\w+)$", r"\1", os.path.basename(path)))
                if not (os.path.exists(link) and os.path.samefile(path, link)):
                    if os.path.lexists(link):
                        os.unlink(link)
                    os.link(path, link)

if commands:
    try:
        with open(ARGS_FILE) as f:
            known = json.load(f)
    except (OSError, ValueError):
        known = {}
    known.update(commands)
    os.makedirs(out, exist_ok=True)
    with open(ARGS_FILE + ".new", "w") as f:
        json.dump(known, f, indent=1, sort_keys=True)
    os.replace(ARGS_FILE + ".new", ARGS_FILE)
