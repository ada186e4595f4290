# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Write a file whole or not at all: a sibling temporary file, then ``os.replace``.

A reader (a browser on the plan report, a second run, the dashboard cache) never sees half a file, and a failed
write leaves the old file and no temporary one. Used by the controller-side action plugins.
"""

from __future__ import annotations

import contextlib
import os


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` (its folder created), with permission bits ``mode`` when given."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.part-{os.getpid()}"
    try:
        with open(partial, "wb") as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(partial, mode)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
