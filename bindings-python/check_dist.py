"""Lists the Python release artifacts' members and fails on anything unexpected
or missing (run by `make python-dist`; stdlib only, no network).

    python check_dist.py VERSION WHEEL... SDIST

A wheel holds the package (Python sources, stubs, py.typed), one stripped abi3
extension built for the wheel's architecture, and dist-info with the licence.
The sdist holds what a source build needs (the core's and this crate's sources,
the core's Lua scripts, the manifests, Cargo.lock, the licence) and nothing the
repository keeps for itself: suites, benchmarks, examples, other bindings,
target dirs, built modules.
"""

from __future__ import annotations

import re
import struct
import sys
import tarfile
import zipfile
from fnmatch import fnmatchcase

PKG_FILES = ["__init__.py", "__init__.pyi", "_polylimit.pyi", "_adapters.py", "client.py", "django.py", "fastapi.py",
             "flask.py", "grpc/__init__.py", "grpc/aio.py", "otel.py", "py.typed"]
# Each framework's extra and the distribution it must require.
EXTRAS = {"fastapi": "fastapi", "django": "django", "flask": "flask", "grpc": "grpcio", "otel": "opentelemetry-sdk"}
# ELF e_machine per wheel platform architecture.
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}


def wheel_expected(version: str) -> tuple[list[str], list[str]]:
    di = f"polylimit-{version}.dist-info"
    required = [f"polylimit/{f}" for f in PKG_FILES] + [
        "polylimit/_polylimit.abi3.so",
        f"{di}/METADATA",
        f"{di}/WHEEL",
        f"{di}/RECORD",
        f"{di}/licenses/LICENSE",
    ]
    # maturin's CycloneDX bill of materials of the crates compiled in (PEP 770).
    return required, [f"{di}/sboms/*.cyclonedx.json"]


def sdist_expected(version: str) -> tuple[list[str], list[str]]:
    required = [
        "PKG-INFO",
        "pyproject.toml",
        "Cargo.toml",
        "Cargo.lock",
        "LICENSE",
        "README.md",
        "bindings-python/Cargo.toml",
        "bindings-python/LICENSE",
        "bindings-python/src/lib.rs",
        "core/Cargo.toml",
        "core/src/lib.rs",
        "core/lua/check.lua",
    ] + [f"python/polylimit/{f}" for f in PKG_FILES]
    allowed = [
        "bindings-python/README.md",
        "bindings-python/src/*.rs",
        "core/src/*.rs",
        "core/src/*/*.rs",
        "core/lua/*.lua",
    ]
    return [f"polylimit-{version}/{p}" for p in required], [f"polylimit-{version}/{p}" for p in allowed]


def check_members(name: str, members: list[str], required: list[str], allowed: list[str]) -> list[str]:
    errors = [f"{name}: missing {m}" for m in required if m not in members]
    for m in members:
        if m not in required and not any(fnmatchcase(m, pat) for pat in allowed):
            errors.append(f"{name}: unexpected {m}")
    return errors


def elf_facts(data: bytes) -> tuple[int, set[str]]:
    """(e_machine, section names) of a little-endian ELF64 shared object."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    e_machine = struct.unpack_from("<H", data, 18)[0]
    e_shoff = struct.unpack_from("<Q", data, 40)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        sh_name = struct.unpack_from("<I", data, off)[0]
        sh_offset, sh_size = struct.unpack_from("<QQ", data, off + 24)
        sections.append((sh_name, sh_offset, sh_size))
    _, str_off, str_size = sections[e_shstrndx]
    strtab = data[str_off : str_off + str_size]
    names = {strtab[n : strtab.index(b"\0", n)].decode() for n, _, _ in sections}
    return e_machine, names


def check_wheel(path: str, version: str) -> list[str]:
    name = path.rsplit("/", 1)[-1]
    m = re.fullmatch(rf"polylimit-{re.escape(version)}-cp39-abi3-(manylinux\S*)\.whl", name)
    if not m:
        return [f"{name}: not a polylimit-{version} cp39-abi3 manylinux wheel name"]
    archs = {next((a for a in ELF_MACHINE if t.endswith("_" + a)), t) for t in m.group(1).split(".")}
    with zipfile.ZipFile(path) as zf:
        members = [i.filename for i in zf.infolist() if not i.is_dir()]
        errors = check_members(name, members, *wheel_expected(version))
        if errors:
            return errors
        so = zf.read("polylimit/_polylimit.abi3.so")
        meta = zf.read(f"polylimit-{version}.dist-info/METADATA").decode()
    if len(archs) != 1 or next(iter(archs)) not in ELF_MACHINE:
        return [f"{name}: unexpected platform tag {m.group(1)}"]
    arch = next(iter(archs))
    machine, sections = elf_facts(so)
    if machine != ELF_MACHINE[arch]:
        errors.append(f"{name}: the extension is ELF machine {machine}, not {arch}")
    if ".debug_info" in sections or ".symtab" in sections:
        errors.append(f"{name}: the extension is not stripped")
    errors += check_metadata(name, meta, version)
    print(f"  {name}: {len(members)} files, extension {len(so)} bytes ({arch}, stripped)")
    return errors


def check_metadata(name: str, meta: str, version: str) -> list[str]:
    errors = []
    for line in [
        f"Version: {version}",
        "Requires-Python: >=3.9",
        *(f"Provides-Extra: {extra}" for extra in EXTRAS),
        "License-File: LICENSE",
        "License-Expression: Apache-2.0",
    ]:
        if line not in meta.splitlines():
            errors.append(f"{name}: metadata lacks {line!r}")
    for extra, dist in EXTRAS.items():
        if not re.search(rf"^Requires-Dist: {dist}\b.*extra == .{extra}.", meta, re.M):
            errors.append(f"{name}: the {extra} extra does not require {dist}")
    return errors


def check_sdist(path: str, version: str) -> list[str]:
    name = path.rsplit("/", 1)[-1]
    if name != f"polylimit-{version}.tar.gz":
        return [f"{name}: expected polylimit-{version}.tar.gz"]
    with tarfile.open(path) as tf:
        members = [i.name for i in tf.getmembers() if not i.isdir()]
        errors = check_members(name, members, *sdist_expected(version))
        pkg_info = tf.extractfile(f"polylimit-{version}/PKG-INFO")
        meta = pkg_info.read().decode() if pkg_info else ""
        manifest = tf.extractfile(f"polylimit-{version}/core/Cargo.toml")
        core_toml = manifest.read().decode() if manifest else ""
    if re.search(r"^\[\[(bench|test|example)\]\]", core_toml, re.M):
        errors.append(f"{name}: core/Cargo.toml declares a target whose files are not shipped")
    errors += check_metadata(name, meta, version)
    print(f"  {name}: {len(members)} files")
    return errors


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    version, paths = argv[1], argv[2:]
    errors = []
    for p in paths:
        errors += check_wheel(p, version) if p.endswith(".whl") else check_sdist(p, version)
    for e in errors:
        print(f"check_dist: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
