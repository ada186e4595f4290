"""NVIDIA driver branch facts for the provisioning roles (pure Python, stdlib only, no I/O).

Kept deliberately small and driver-focused: which CUDA a driver runs is the CUDA ↔ driver table of
:mod:`.cuda_driver` (shared with preflight and the image table), and the vLLM → torch → CUDA table is the
IMAGE area's (``image/compat.py``). This module answers three questions for ``roles/nvidia_driver``:

* which CUDA versions a branch the role installs can run (``max_cuda_for_branch`` / ``check_branch_supports_cuda``),
* which packages a branch means on a given distribution and source (``driver_packages``),
* what ``nvidia-smi`` output says about the loaded kernel module (``classify_nvidia_smi``).
"""

from __future__ import annotations

import re

from .cuda_driver import format_cuda, max_cuda_for_driver, min_driver_branch, parse_branch, parse_cuda

__all__ = [
    "BRANCH_MAX_CUDA",
    "SOURCES",
    "SUPPORTED_BRANCHES",
    "check_branch_supports_cuda",
    "classify_nvidia_smi",
    "cuda_repo_path",
    "driver_packages",
    "fabricmanager_package",
    "format_cuda",
    "loaded_driver_version",
    "max_cuda_for_branch",
    "parse_branch",
    "parse_cuda",
]

#: The production branches the nvidia_driver role installs (R535 is Debian 12's packaged driver).
SUPPORTED_BRANCHES: tuple[int, ...] = (535, 550, 570, 575, 580)


def _branch_limit(branch: int) -> tuple[int, int]:
    limit = max_cuda_for_driver(branch)
    if limit is None:
        raise ValueError(f"driver branch {branch} is older than every CUDA release in provision/cuda_driver.py")
    return limit


#: Highest CUDA (major, minor) each installable branch runs, derived from the CUDA ↔ driver table.
BRANCH_MAX_CUDA: dict[int, tuple[int, int | None]] = {b: _branch_limit(b) for b in SUPPORTED_BRANCHES}

SOURCES = ("distro", "cuda_repo")

_VERSION_RE = re.compile(r"(\d{3}\.\d+(?:\.\d+)?)")


def max_cuda_for_branch(branch: str | int) -> tuple[int, int | None]:
    """Highest CUDA version a driver branch supports; ``ValueError`` for a branch the role does not install."""
    number = parse_branch(branch)
    if number not in BRANCH_MAX_CUDA:
        known = ", ".join(str(b) for b in sorted(BRANCH_MAX_CUDA))
        raise ValueError(f"driver branch {number} is not one of the supported branches ({known})")
    return BRANCH_MAX_CUDA[number]


def check_branch_supports_cuda(branch: str | int, cuda: str) -> tuple[bool, str]:
    """Can driver ``branch`` run an image built for CUDA ``cuda``? Returns (ok, one-line reason)."""
    number = parse_branch(branch)
    limit = max_cuda_for_branch(number)
    major, minor = parse_cuda(cuda)
    if _within(major, minor, limit):
        return (
            True,
            f"driver R{number} supports CUDA up to {format_cuda(limit)}; the image needs {major}.{minor}",
        )
    newer = [b for b, lim in sorted(BRANCH_MAX_CUDA.items()) if _within(major, minor, lim)]
    needed = min_driver_branch((major, minor))
    if newer:
        hint = f"pin nvidia_driver_branch to {newer[0]} or newer"
    elif needed is not None:
        hint = f"it needs driver R{needed} or newer, which this role does not install"
    else:
        hint = "no known branch supports it"
    return False, (
        f"driver R{number} supports CUDA up to {format_cuda(limit)} but the planned image needs CUDA "
        f"{major}.{minor}: {hint}, or plan an image built for an older CUDA"
    )


def _within(major: int, minor: int, limit: tuple[int, int | None]) -> bool:
    if major != limit[0]:
        return major < limit[0]
    return limit[1] is None or minor <= limit[1]


def driver_packages(distribution: str, source: str, branch: str | int, version: str = "") -> list[str]:
    """Packages that install driver ``branch`` on ``distribution`` (``Debian``/``Ubuntu``) from ``source``.

    ``version`` (a full package version, e.g. ``535.261.03-1``) pins the main package with ``=``.
    """
    number = parse_branch(branch)
    pin = f"={version}" if version else ""
    if source not in SOURCES:
        raise ValueError(f"driver source {source!r} is not one of {', '.join(SOURCES)}")
    if source == "cuda_repo":
        # NVIDIA's CUDA repository: one meta package per branch pulls driver, utilities and NVML.
        return [f"cuda-drivers-{number}{pin}"]
    if distribution == "Debian":
        if number != 535:
            raise ValueError(
                f"Debian 12 non-free ships only the R535 branch, not R{number}: "
                "set nvidia_driver_source: cuda_repo for other branches"
            )
        return [f"nvidia-driver{pin}", f"nvidia-smi{pin}", f"libnvidia-ml1{pin}"]
    if distribution == "Ubuntu":
        return [f"nvidia-driver-{number}-server{pin}", f"nvidia-utils-{number}-server{pin}"]
    raise ValueError(f"distribution {distribution!r} is not supported (Debian, Ubuntu)")


def fabricmanager_package(branch: str | int, driver_version: str) -> str:
    """The fabric manager package of exactly the installed driver's version (NVSwitch systems).

    NVIDIA refuses to start fabric manager when its version differs from the loaded driver, so it is
    always pinned to the upstream part of ``driver_version`` (the installed package version, e.g.
    ``580.95.05-1`` → ``580.95.05-*``: Ubuntu's and NVIDIA's Debian revisions differ between the two).
    """
    number = parse_branch(branch)
    if not driver_version:
        raise ValueError("fabric manager needs the installed driver's package version to pin to")
    if parse_branch(driver_version) != number:
        raise ValueError(
            f"installed driver {driver_version} is not of branch R{number}: fix the driver before fabric manager"
        )
    name = "nvidia-fabricmanager" if number >= 580 else f"nvidia-fabricmanager-{number}"
    upstream = driver_version.split(":", 1)[-1].split("-", 1)[0]
    return f"{name}={upstream}-*"


def classify_nvidia_smi(rc: int, output: str) -> str:
    """What ``nvidia-smi``'s exit status and output say about the driver.

    ``ok``: it talks to the driver; ``mismatch``: user-space libraries were upgraded but the old kernel
    module is still loaded (a reboot fixes it); ``no_driver``: no kernel module loaded; ``missing``:
    nvidia-smi not installed; ``error``: anything else.
    """
    text = output.lower()
    if "driver/library version mismatch" in text:
        return "mismatch"
    if rc == 0:
        return "ok"
    if rc == 127 or ("not found" in text and "nvidia-smi" in text):
        return "missing"
    if "couldn't communicate with the nvidia driver" in text or "no devices were found" in text:
        return "no_driver"
    return "error"


def loaded_driver_version(proc_version_text: str) -> str:
    """Version of the loaded kernel module from ``/proc/driver/nvidia/version`` ('' when absent)."""
    for line in proc_version_text.splitlines():
        if "Kernel Module" in line:
            match = _VERSION_RE.search(line)
            if match:
                return match.group(1)
    return ""


#: NVIDIA's signing key of its CUDA repositories: a file in each repository directory.
CUDA_REPO_KEY_FILE = "3bf863cc.pub"


def cuda_repo_source(
    base_url: str, key: str, distribution: str, major_version: str, version: str, architecture: str
) -> dict[str, str]:
    """A host's CUDA repository source: ``uri`` (the directory under ``base_url``, NVIDIA's or a mirror's) and
    ``signed_by`` (``key`` when given, else NVIDIA's key file next to the packages). The driver role and the DCGM
    exporter's install both configure it (one source file)."""
    uri = f"{base_url.rstrip('/')}/{cuda_repo_path(distribution, major_version, version, architecture)}/"
    return {"uri": uri, "signed_by": key or uri + CUDA_REPO_KEY_FILE}


def cuda_repo_path(distribution: str, major_version: str, version: str, architecture: str) -> str:
    """Directory of NVIDIA's CUDA repository for a host: ``debian12/x86_64``, ``ubuntu2204/sbsa``."""
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}.get(architecture)
    if arch is None:
        raise ValueError(f"architecture {architecture!r} has no CUDA repository (x86_64, aarch64)")
    if distribution == "Debian":
        return f"debian{major_version}/{arch}"
    if distribution == "Ubuntu":
        return f"ubuntu{version.replace('.', '')}/{arch}"
    raise ValueError(f"distribution {distribution!r} is not supported (Debian, Ubuntu)")
