# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Pack NVIDIA's cuda-compat libraries (an operator-provided folder) into a wheel for the image's wheelhouse.

Usage: cuda_compat_wheel.py SRC_DIR WHEELHOUSE DIST MODULE VERSION FILENAME

The names come from plugins/plugin_utils/image/forward_compat.py ``compat_wheel`` (via the build plan). Every file of
SRC_DIR (symbolic links followed, so libcuda.so.1 is a real file) lands in ``MODULE/lib/``, where the image's
``VLLM_CUDA_COMPATIBILITY_PATH`` points. Standard library only: it runs with the controller's Python.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    src, wheelhouse, dist, module, version, filename = argv
    files = sorted(p for p in Path(src).rglob("*") if p.is_file())
    if not any(p.name.startswith("libcuda.so") for p in files):
        print(f"{src} has no libcuda.so*: it is not a cuda-compat folder (e.g. /usr/local/cuda-13.0/compat of the "
              "cuda-compat-13-0 package)", file=sys.stderr)
        return 1
    dist_info = f"{module}-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [(f"{module}/__init__.py", b"")]
    entries += [(f"{module}/lib/{p.relative_to(src).as_posix()}", p.read_bytes()) for p in files]
    entries.append((f"{dist_info}/METADATA",
                    f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                    "Summary: NVIDIA cuda-compat libraries for CUDA forward compatibility (packed by vllm-fleet)\n"
                    .encode()))
    entries.append((f"{dist_info}/WHEEL",
                    b"Wheel-Version: 1.0\nGenerator: vllm-fleet\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"))
    record = [_record_line(name, data) for name, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    out = Path(wheelhouse) / filename
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16 if "/lib/" in name else 0o644 << 16
            wheel.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
