"""CUDA forward compatibility: may a host whose driver is older than its image's CUDA run it through ``cuda-compat``?

Pure data plus pure functions (standard library only, no I/O). ``compat.select_image`` asks :func:`decide` when the
planned vLLM's CUDA images need a newer driver than the host has; preflight refuses what :func:`decide` refuses.

The rules, from NVIDIA's CUDA Compatibility documentation:

* https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html, "Forward Compatibility Support
  Across Major Toolkit Versions": forward compatibility "is applicable only for systems with: NVIDIA Data Center
  GPUs; Select NGC Server Ready SKUs of RTX cards; Jetson boards", through the "CUDA Compatibility Package"
  ``cuda-compat-<major>-<minor>``, which "is generated from the NVIDIA driver that matches with the CUDA release for
  which the compatibility is requested" (so cuda-compat-13-0 carries the user-space driver 580.65.06, the CUDA 13.0
  driver of ``provision/cuda_driver.py``).
* https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html, Table 2
  "CUDA and Drivers": R535 (Long Term Support Branch, end of life June 2026) "Maximum CUDA Major Version Supported
  Without Forward Compatibility Package": CUDA 12; R580 (LTSB), R595 (PB), R610 (NFB): CUDA 13. R535 is the oldest
  branch NVIDIA still supports, so it is the oldest base driver this module accepts (older: refused, with R535 and
  the native minimum as the fix).
* vLLM's switch (0.32.0 ``vllm/env_override.py:51-90``, ``_maybe_set_cuda_compatibility_path``): with
  ``VLLM_ENABLE_CUDA_COMPATIBILITY=1`` vLLM puts ``VLLM_CUDA_COMPATIBILITY_PATH`` (default
  ``/usr/local/cuda-<torch.version.cuda>/compat``) first on ``LD_LIBRARY_PATH`` before torch loads CUDA; its
  docstring: "Consumer GPUs (GeForce, RTX) do not support it and will get Error 803 if compat libs are loaded".

Inferred, not in the current table: R550, R560 and R570 (ended production / new-feature branches between R535 and
R580) are accepted like R535; the documentation sets no branch limit besides the data-center-GPU one, and the
fixtures' R550 host (h100x8_nvswitch, 550.127.05) is one of the fleets the issue names.

Datacenter or not comes from the GPU catalogue (``planner/hardware.py`` ``GpuSku.segment``); a GPU the catalogue
does not know is not assumed to be a data center GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import lookup_gpu
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import (
    driver_runs_cuda,
    min_driver_version,
    parse_cuda,
    parse_driver_version,
)

#: The oldest base driver branch forward compatibility is accepted on (NVIDIA's oldest supported branch, R535 LTSB).
MIN_BASE_BRANCH = 535
#: What ``vllm_image_forward_compat`` may say: ``auto`` (use it where the facts allow), ``true`` (also on a
#: workstation RTX, which NVIDIA lists for "select NGC Server Ready SKUs" only), ``false`` (never).
CHOICES = ("auto", "true", "false")
SOURCES = (
    "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html (Forward Compatibility Support "
    "Across Major Toolkit Versions: data center GPUs only; cuda-compat-<major>-<minor>)",
    "https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html "
    "(Table 2 CUDA and Drivers: R535 LTSB max CUDA 12 without the forward compatibility package)",
    "vllm 0.32.0 vllm/env_override.py:51-90 (VLLM_ENABLE_CUDA_COMPATIBILITY, VLLM_CUDA_COMPATIBILITY_PATH)",
)


class ForwardCompatError(ValueError):
    """Forward compatibility cannot make this driver run the image; the message names the driver to install."""


@dataclass(frozen=True)
class ForwardCompatDecision:
    """How a host runs an image of CUDA ``cuda_version``: ``native`` (its driver is new enough) or ``forward``
    (through ``package``, whose user-space driver is ``compat_driver``, with ``env`` set in the image)."""

    mode: str
    cuda_version: str
    reason: str
    package: str = ""
    compat_driver: str = ""
    env: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "cuda_version": self.cuda_version, "reason": self.reason, "package": self.package,
                "compat_driver": self.compat_driver, "env": dict(self.env)}


def compat_package(cuda_version: str) -> str:
    """``"13.0"`` → ``"cuda-compat-13-0"`` (NVIDIA's package name for that CUDA)."""
    major, minor = parse_cuda(cuda_version)
    return f"cuda-compat-{major}-{minor}"


def compat_wheel(cuda_version: str, compat_driver: str, python_version: str) -> dict[str, str]:
    """The wheel that carries the ``cuda-compat`` libraries into the image (built on the controller from
    ``vllm_image_cuda_compat_dir`` by the role's ``files/cuda_compat_wheel.py``, installed with vLLM from the
    wheelhouse) and where its libraries land in the image's venv (``VLLM_CUDA_COMPATIBILITY_PATH``).

    A wheel, not a Dockerfile step: the image template (and so every other image's tag) stays as it is, and the
    air-gapped wheelhouse is the one way files reach the image build.
    """
    major, minor = parse_cuda(cuda_version)
    module = f"vllm_fleet_cuda_compat_{major}_{minor}"
    return {
        "dist": f"vllm-fleet-cuda-compat-{major}-{minor}",
        "module": module,
        "version": compat_driver,
        "requirement": f"vllm-fleet-cuda-compat-{major}-{minor}=={compat_driver}",
        "filename": f"{module}-{compat_driver}-py3-none-linux_x86_64.whl",
        "path": f"/opt/venv/lib/python{python_version}/site-packages/{module}/lib",
    }


def gpu_segment(name: str) -> str:
    """The catalogue's segment of an nvidia-smi GPU name; ``unknown`` for a GPU it does not know."""
    sku = lookup_gpu(name)
    return sku.segment if sku is not None else "unknown"


def decide(cuda_version: str, driver_version: str, gpu_names: Sequence[str], *,
           choice: str = "auto") -> ForwardCompatDecision:
    """How a host with this driver and these GPUs runs an image of CUDA ``cuda_version``.

    :param cuda_version: the image's CUDA (``ImageProfile.cuda_version``).
    :param driver_version: ``nvidia-smi`` driver version (CONTRACT 1 ``driver_version``).
    :param gpu_names: the host's GPU names as nvidia-smi prints them.
    :param choice: ``vllm_image_forward_compat`` (:data:`CHOICES`).
    :raises ForwardCompatError: the driver is too old and forward compatibility is off, not for these GPUs, or the
        driver is older than even forward compatibility accepts; the message says which driver to install.
    """
    if choice not in CHOICES:
        raise ForwardCompatError(f"vllm_image_forward_compat {choice!r} is not one of: {', '.join(CHOICES)}")
    native = min_driver_version(cuda_version)
    if native is None:
        raise ForwardCompatError(f"CUDA {cuda_version} is not in the CUDA/driver table "
                                 "(plugins/plugin_utils/provision/cuda_driver.py)")
    branch = parse_driver_version(driver_version)[0]
    if driver_runs_cuda(driver_version, cuda_version):
        return ForwardCompatDecision("native", cuda_version, f"driver {driver_version} >= {native} runs CUDA "
                                     f"{cuda_version} natively")
    install = f"install driver >= {native} (R{parse_driver_version(native)[0]}+)"
    if choice == "false":
        raise ForwardCompatError(f"CUDA {cuda_version} needs driver >= {native}, the host has {driver_version} and "
                                 f"forward compatibility is off (vllm_image_forward_compat: false): {install}")
    if branch < MIN_BASE_BRANCH:
        raise ForwardCompatError(
            f"driver {driver_version} is older than R{MIN_BASE_BRANCH}, the oldest branch CUDA forward compatibility "
            f"is accepted on: {install}, or at least R{MIN_BASE_BRANCH} on a data center GPU (then "
            f"{compat_package(cuda_version)} runs CUDA {cuda_version})")
    names = [str(n) for n in gpu_names] or ["(no GPU name reported)"]
    segments = {name: gpu_segment(name) for name in names}
    allowed = {"datacenter", "workstation"} if choice == "true" else {"datacenter"}
    refused = [f"{name} ({segment})" for name, segment in segments.items() if segment not in allowed]
    if refused:
        why = ("NVIDIA supports CUDA forward compatibility on data center GPUs only (and select NGC Server Ready RTX "
               "SKUs: set vllm_image_forward_compat: true for those)")
        raise ForwardCompatError(
            f"CUDA {cuda_version} needs driver >= {native}, the host has {driver_version}, and {', '.join(refused)} "
            f"cannot use forward compatibility ({why}): {install}")
    package = compat_package(cuda_version)
    return ForwardCompatDecision(
        "forward", cuda_version,
        f"driver {driver_version} < {native}: CUDA {cuda_version} through forward compatibility ({package}, user-space "
        f"driver {native}, on {', '.join(sorted(set(names)))}: {'/'.join(sorted(set(segments.values())))} GPU; "
        f"vLLM loads it with VLLM_ENABLE_CUDA_COMPATIBILITY=1)",
        package=package, compat_driver=native, env={"VLLM_ENABLE_CUDA_COMPATIBILITY": "1"},
    )
