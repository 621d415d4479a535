#!/usr/bin/env python3
"""Reads `cargo test --no-run --message-format=json-render-diagnostics` on stdin
and hard-links the workspace's static and shared libraries it built (the C ABI's
libpolylimit_capi.a, the JVM's libpolylimit_jvm.so, …) to target/debug/, where
`cargo build` would put them: the bindings' suites link the libraries of the
tests' own build. (A `cargo build` puts them there too, but for the cdylibs it
is another unit writing the same file, so each switch rebuilds it.)"""

import json
import os
import re
import sys

out = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "debug")
for text in sys.stdin:
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
