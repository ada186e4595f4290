"""CUDA ↔ NVIDIA driver: the one compatibility table and both directions over it (pure, stdlib only, no I/O).

Everything that asks "can this driver run that CUDA?" imports from here: the driver role
(:mod:`.driver`), preflight (``check_driver_cuda``) and the image table (each row's minimum driver is derived
from its base image's CUDA).

The rule is the one the NVIDIA container runtime enforces at container start: an ``nvidia/cuda:X.Y.Z`` image
carries ``NVIDIA_REQUIRE_CUDA=cuda>=X.Y``, and the driver must report at least that CUDA version
("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver",
vllm-project/vllm issue #5635). A driver reports the CUDA of the release it shipped with, so the minimum driver
of CUDA X.Y is the driver of the X.Y GA release. Minor-version compatibility (a R580 driver running a 13.2
application) and forward compatibility through ``cuda-compat`` (datacenter GPUs only) are deliberately not
assumed.
"""

from __future__ import annotations

import re

#: CUDA X.Y → the minimum Linux x86_64 driver of its GA release (NVIDIA CUDA Toolkit release notes, Table 3
#: "CUDA Toolkit and Corresponding Driver Versions"; vllm-facts §E: 13.0 needs R580+, 12.9 R575+).
CUDA_MIN_DRIVER: dict[str, str] = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
    "13.2": "595.45.04",
}

_BRANCH_RE = re.compile(r"^\s*[Rr]?(\d{3})(?:\.\d+)*\s*$")
_CUDA_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")
_DRIVER_RE = re.compile(r"^\s*[Rr]?(\d+(?:\.\d+)*)")


def parse_branch(value: str | int) -> int:
    """Return the branch number of ``535``, ``"R535"``, ``"535.261.03"`` or ``"535.261.03-1"``."""
    text = str(value).split(":", 1)[-1].split("-", 1)[0]  # drop a Debian epoch and revision
    match = _BRANCH_RE.match(text)
    if match is None:
        raise ValueError(f"driver branch {value!r} is not a branch like '535' or a version like '535.261.03'")
    return int(match.group(1))


def parse_cuda(value: str) -> tuple[int, int]:
    """Return (major, minor) of a CUDA version such as ``"12.2"`` or ``"12.2.1"``."""
    match = _CUDA_RE.match(str(value))
    if match is None:
        raise ValueError(f"CUDA version {value!r} is not like '12.2'")
    return int(match.group(1)), int(match.group(2))


def parse_driver_version(value: str | int) -> tuple[int, ...]:
    """``"535.261.03"`` → ``(535, 261, 3)``; ``580``/``"R580"`` → ``(580,)`` (a branch: any driver of it)."""
    match = _DRIVER_RE.match(str(value))
    if match is None:
        raise ValueError(f"cannot read a driver version number from {value!r} (expected e.g. '580.95.05')")
    return tuple(int(part) for part in match.group(1).split("."))


def format_cuda(limit: tuple[int, int | None]) -> str:
    """``(12, 2)`` → ``"12.2"``; ``(13, None)`` → ``"13.x"``."""
    major, minor = limit
    return f"{major}.x" if minor is None else f"{major}.{minor}"


def _key(cuda: str | tuple[int, int]) -> str:
    major, minor = cuda if isinstance(cuda, tuple) else parse_cuda(cuda)
    return f"{major}.{minor}"


def min_driver_version(cuda: str | tuple[int, int]) -> str | None:
    """The minimum driver of CUDA ``cuda`` (``"13.0"`` → ``"580.65.06"``); ``None`` for a CUDA not in the table."""
    return CUDA_MIN_DRIVER.get(_key(cuda))


def min_driver_branch(cuda: str | tuple[int, int]) -> int | None:
    """The minimum driver branch of CUDA ``cuda`` (``"12.9"`` → ``575``); ``None`` for a CUDA not in the table."""
    version = min_driver_version(cuda)
    return None if version is None else parse_driver_version(version)[0]


def _meets(driver: tuple[int, ...], minimum: str) -> bool:
    need = parse_driver_version(minimum)
    if len(driver) == 1:  # a bare branch: any driver of the branch that shipped the CUDA
        return driver[0] >= need[0]
    return driver >= need


def max_cuda_for_driver(driver: str | int) -> tuple[int, int] | None:
    """The newest CUDA (major, minor) a driver (branch or full version) reports; ``None`` below every row."""
    have = parse_driver_version(driver)
    runs = [parse_cuda(cuda) for cuda, minimum in CUDA_MIN_DRIVER.items() if _meets(have, minimum)]
    return max(runs) if runs else None


def driver_runs_cuda(driver: str | int, cuda: str | tuple[int, int]) -> bool:
    """Can a driver (branch or full version) start an image built on CUDA ``cuda``?

    A CUDA newer than every row needs a driver the table does not know of, and a driver older than every row
    is not known to run anything: both ``False``.
    """
    want = parse_cuda(cuda) if isinstance(cuda, str) else cuda
    limit = max_cuda_for_driver(driver)
    return limit is not None and want <= limit
