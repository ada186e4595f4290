"""What a built cuda image really carries, read inside it without a GPU (run with the image's /opt/venv/bin/python).

Usage: python image_cuda_check.py  ->  one JSON object on stdout:

* ``torch_cuda``: ``torch.version.cuda`` (the CUDA torch was built with), ``torch``/``vllm``: their versions;
* ``extensions``: every compiled extension of the vllm package (``vllm/**/*.so``), each with the GPU architectures its
  ELF ``.nv_fatbin`` section embeds (``sm``: cubins, ``ptx``: PTX) and ``import``: ``ok`` or the error (without a
  driver an extension that links libcuda.so.1 cannot load: ``needs_driver``, when that is the loader's only
  complaint);
* ``cuda_libraries``: the ``nvidia-*`` wheels' libraries torch loads (``libcudart``, ``libcublas``, ``libnccl``...).

No cuobjdump in the image (the project base has no CUDA toolkit): the fat binary headers are parsed here. A fat binary
(``.nv_fatbin``) is a run of containers, each a 16-byte header (magic 0xBA55ED50, u16 version, u16 header size, u64
payload size) followed by entries; each entry header has u16 kind (1 PTX, 2 ELF cubin) at 0, u32 header size at 4,
u64 payload size at 8 and u32 SM architecture (e.g. 90 for sm_90, 120 for sm_120) at 28 - the layout public fatbin
readers use (e.g. the structs ``fatBinaryHeader``/``fatBinData`` of NVIDIA's ``fatbinary_section.h``, and the
decompilers that follow it). Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sm"}


def elf_section(handle: BinaryIO, wanted: str) -> bytes | None:
    """The bytes of ELF64 section ``wanted`` (None when absent)."""
    handle.seek(0)
    ident = handle.read(64)
    if ident[:4] != b"\x7fELF" or ident[4] != 2:
        return None
    endian = "<" if ident[5] == 1 else ">"
    shoff = struct.unpack_from(endian + "Q", ident, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", ident, 0x3A)
    handle.seek(shoff)
    table = handle.read(shentsize * shnum)
    sections = [struct.unpack_from(endian + "IIQQQQ", table, i * shentsize) for i in range(shnum)]
    str_off, str_size = sections[shstrndx][4:6]
    handle.seek(str_off)
    names = handle.read(str_size)
    for header in sections:  # (name, type, flags, addr, offset, size)
        name = names[header[0]:names.index(b"\0", header[0])].decode(errors="replace")
        if name == wanted:
            handle.seek(header[4])
            return handle.read(header[5])
    return None


def fatbin_archs(data: bytes) -> dict[str, list[int]]:
    """``{"sm": [...], "ptx": [...]}``: the architectures of every entry of every container in a ``.nv_fatbin``."""
    found: dict[str, set[int]] = {"sm": set(), "ptx": set()}
    pos = 0
    while pos + 16 <= len(data):
        magic, header_size, payload = struct.unpack_from("<I2xHQ", data, pos)  # magic, version, size, payload
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entry, end = pos + header_size, pos + header_size + payload
        while entry + 32 <= end:
            kind, entry_header, entry_payload = struct.unpack_from("<H2xIQ", data, entry)  # kind, version, ...
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if kind in KINDS and entry_header >= 32:
                found[KINDS[kind]].add(arch)
            if entry_header == 0:
                break
            entry += entry_header + entry_payload
        pos = end
    return {kind: sorted(archs) for kind, archs in found.items()}


def main() -> int:
    import importlib
    from importlib import metadata

    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                           "vllm": metadata.version("vllm"), "extensions": {}, "cuda_libraries": []}
    spec = importlib.util.find_spec("vllm")
    root = Path(next(iter(spec.submodule_search_locations or [])))
    for so in sorted(root.rglob("*.so")):
        with so.open("rb") as handle:
            section = elf_section(handle, ".nv_fatbin")
        rel = so.relative_to(root.parent).as_posix()
        archs = fatbin_archs(section) if section else {"sm": [], "ptx": []}
        entry: dict[str, Any] = {"bytes": so.stat().st_size, **archs}
        module = ".".join(so.relative_to(root.parent).with_name(so.name.split(".", 1)[0]).parts)
        try:
            importlib.import_module(module)  # a Python extension (vllm._C ...)
            entry["import"] = "ok"
        except ImportError as exc:
            # The loader's own answer (a package __init__ may have replaced it, or the file is a plain library).
            try:
                ctypes.CDLL(str(so))
                entry["import"] = "ok" if "PyInit_" in str(exc) else f"loads; module import: {exc}"
            except OSError as err:
                entry["import"] = "needs_driver" if "libcuda.so.1" in str(err) else f"error: {err}"
        out["extensions"][rel] = entry
    site = root.parent
    out["cuda_libraries"] = sorted(p.name for p in (site / "nvidia").rglob("lib*.so*"))[:200] \
        if (site / "nvidia").is_dir() else []
    print(json.dumps(out, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
