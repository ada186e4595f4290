"""Build plan for the vllm_image role: from a chosen profile to tag, render context and build args.

Pure (standard library only, no I/O): the role gathers the facts that need I/O (base image id, template and
constraints checksums) and passes them in; everything computed lives here and is unit-tested.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_SERVE_PORT,
    REMOVED_ENV_VARS,
    rules_for,
)

from . import forward_compat as fc
from .tag import image_tag, inputs_digest

INSTALL_MODES = ("wheelhouse", "index")
#: What the plan renders for (backend.py chooses between them for a builder host).
BUILD_BACKENDS = ("buildkit", "classic")

#: Runtime packages per variant (Debian/Ubuntu names).  cpu: libnuma1 (vllm._C), g++ + python3-dev + openssl (torch
#: inductor compiles on CPU), learned in environment.md.  cuda: gcc + libc6-dev + python3-dev (Triton
#: builds its launcher stubs at run time).
RUNTIME_PACKAGES = {
    "cpu": ("python3", "tini", "ca-certificates", "libnuma1", "g++", "python3-dev", "openssl"),
    "cuda": ("python3", "tini", "ca-certificates", "gcc", "libc6-dev", "python3-dev"),
}
BUILD_PACKAGES = ("python3", "python3-venv", "ca-certificates")

#: The cuda images' install-step check (no GPU needed): vLLM and torch import, torch is a CUDA build.
CUDA_IMPORT_CHECK = "import torch, vllm; assert torch.version.cuda; print(vllm.__version__, torch.__version__, torch.version.cuda)"

#: Packages the cpu wheel pulls in that do not import beside CPU torch (environment.md): removed.
CPU_REMOVE_PACKAGES = ("torchvision", "torchaudio", "torchcodec")

#: vLLM variables the image sets; none of the removed ones (the planner rules' REMOVED_ENV_VARS).
#: Not VLLM_CPU_KVCACHE_SPACE: vLLM 0.32 lets that legacy variable override --kv-cache-memory-bytes, so a
#: baked-in value would silently replace the planned KV size (caught by the deploy's plan feedback).
_NO_TELEMETRY = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
DEFAULT_ENV = {
    "cpu": {"VLLM_TARGET_DEVICE": "cpu", **_NO_TELEMETRY},
    "cuda": dict(_NO_TELEMETRY),
}
#: Every variable some vLLM release no longer knows (planner/rules.py REMOVED_ENV). An image refuses the ones its
#: own vLLM version dropped (``rules_for(version).removed_env``: the Ray variables 0.33 removed are fine for 0.32).
REMOVED_ENV = frozenset(REMOVED_ENV_VARS)


def removed_env_for(vllm_version: str) -> dict[str, str]:
    """The variables vLLM ``vllm_version`` no longer knows → what to use instead (all of them for an unreadable
    version)."""
    try:
        return {entry.name: entry.instead() for entry in rules_for(vllm_version).removed_env}
    except ValueError:
        return dict(REMOVED_ENV_VARS)


class ImageBuildError(ValueError):
    """Bad build options; the message says what to change."""


#: Where a cuda image is built FROM (``vllm_image_cuda_base``). ``project``: the project's own debootstrap base
#: (scripts/testbed/20-base-image.sh, the cpu variant's), no registry needed: the CUDA user-space libraries come with
#: torch's ``nvidia-*`` wheels, and the driver's libcuda is mounted by the NVIDIA container runtime. ``nvidia``: the
#: row's ``nvidia/cuda`` base from a registry (or its mirror). ``auto``: ``project`` for a row whose wheels were
#: checked for that base (``project_python``), else ``nvidia``.
CUDA_BASES = ("auto", "project", "nvidia")
#: The project's base: Debian 12 (bookworm), python 3.11, glibc 2.36 (the cpu row of each release records the same).
PROJECT_BASE = {"image": "vllm-fleet/debian:bookworm", "glibc": "2.36", "release": "Debian 12 (bookworm)"}
#: What an nvidia/cuda base sets and the project's base does not: the NVIDIA container runtime mounts the GPUs and
#: the driver's compute (libcuda) and utility (nvidia-smi) libraries only when the image asks for them.
NVIDIA_CONTAINER_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def for_cuda_base(profile: Mapping[str, Any], cuda_base: str = "nvidia", project_image: str = "",
                  project_present: bool = True) -> dict[str, Any]:
    """The profile as it is built on the chosen cuda base (a cpu profile is returned as it is).

    ``auto`` takes the project base when the row's wheels were checked for it and the base is on the builder's
    engine (``project_present``, a discovered fact); otherwise the row's ``nvidia/cuda`` image, as before.

    On the project base, the image, python and glibc are the project base's, and ``base_kind``/``base_reason`` say
    why (the reason becomes the ``org.vllm-fleet.base.reason`` label). On ``nvidia`` the profile is unchanged.

    :raises ImageBuildError: an unknown choice, or ``project`` for a row whose wheels were not checked for it.
    """
    if cuda_base not in CUDA_BASES:
        raise ImageBuildError(f"cuda base {cuda_base!r} is not one of: {', '.join(CUDA_BASES)}")
    out = dict(profile)
    if out["variant"] != "cuda":
        return out
    python = out.get("project_python")
    if cuda_base == "nvidia" or (cuda_base == "auto" and not (python and project_present)):
        return out
    if not python:
        raise ImageBuildError(
            f"vLLM {out['vllm_version']} ({out['key']}) has no wheels checked for the project base "
            f"({PROJECT_BASE['release']}): set vllm_image_cuda_base: nvidia (with a reachable registry or "
            "vllm_image_registry_mirror), or check the row's wheels for python 3.11 and set project_python in its "
            "release block"
        )
    image = project_image or PROJECT_BASE["image"]
    why = ("chosen (vllm_image_cuda_base: project)" if cuda_base == "project"
           else "auto: on the builder and the row's wheels fit it")
    out.update(
        base_image=image,
        python_version=str(python),
        glibc=PROJECT_BASE["glibc"],
        base_kind="project",
        base_reason=(f"project base {image} ({PROJECT_BASE['release']}, python {python}) {why}; CUDA {out['cuda_version']} "
                     f"user space from torch's nvidia-* wheels, no {profile['base_image']} (needs a registry)"),
    )
    return out


def _ray_requirements(profile: Mapping[str, Any]) -> list[str]:
    """What the row adds for Ray (compat.py ``ray_requirements``; empty when vLLM's own requirements bring Ray).

    :raises ImageBuildError: the row has no Ray pin.
    """
    pins = profile.get("ray_requirements")
    if pins is None:
        raise ImageBuildError(
            f"vLLM {profile['vllm_version']} ({profile['key']}) has no Ray pin in the image compatibility table: add "
            "ray_requirements to its row in plugins/plugin_utils/image/compat.py, or set vllm_image_ray: false and "
            "vllm_serve_multinode_backend: mp"
        )
    return [str(pin) for pin in pins]


def _pip_install_options(install_mode: str, index_url: str, extra_index_urls: Sequence[str], constraints: bool) -> str:
    """The options of the image's ``pip install`` (each with its leading space): the wheelhouse, or the indexes."""
    if install_mode == "wheelhouse":
        options = ["--no-index", "--find-links", "/tmp/wheels"]
    else:
        options = (["--index-url", shlex.quote(index_url)] if index_url else []) + [
            part for url in extra_index_urls for part in ("--extra-index-url", shlex.quote(url))]
    if constraints:
        options += ["-c", "/tmp/constraints.txt"]
    return "".join(f" {option}" for option in options)


def resolve_base_image(profile: Mapping[str, Any], registry_mirror: str = "", cpu_base_image: str = "") -> str:
    """The base image to build FROM: the cpu override, or the profile's image behind the registry mirror."""
    if profile["variant"] == "cpu" or profile.get("base_kind") == "project":
        return cpu_base_image or str(profile["base_image"])
    mirror = registry_mirror.strip()
    if mirror and not mirror.endswith("/"):
        mirror += "/"
    return f"{mirror}{profile['base_image']}"


def _check_options(install_mode: str, uid: int, health_port: int, build_backend: str) -> None:
    """Refuse unknown install modes and backends, a root or out-of-range uid and a port that is not one.

    :raises ImageBuildError: the first bad option, with what it must be.
    """
    if install_mode not in INSTALL_MODES:
        raise ImageBuildError(f"install mode {install_mode!r} is not one of: {', '.join(INSTALL_MODES)}")
    if not 1 <= int(uid) < 65535 or int(uid) == 0:
        raise ImageBuildError(f"uid {uid} must be a non-root user id (1-65534)")
    if not 1 <= int(health_port) <= 65535:
        raise ImageBuildError(f"health port {health_port} is not a TCP port")
    if build_backend not in BUILD_BACKENDS:
        raise ImageBuildError(f"build backend {build_backend!r} is not one of: {', '.join(BUILD_BACKENDS)}")


def _base_step(profile: Mapping[str, Any], base_image: str, base_image_id: str) -> dict[str, Any]:
    """Step 1, the base: what the image is built FROM and the distribution packages installed on it."""
    variant = str(profile["variant"])
    return {
        "variant": variant,
        "base_image": base_image,
        "base_image_id": base_image_id,
        "packages": {
            "build": list(BUILD_PACKAGES),
            "runtime": list(RUNTIME_PACKAGES[variant]),
            "remove": list(CPU_REMOVE_PACKAGES) if variant == "cpu" else [],
        },
    }


def _environment_step(profile: Mapping[str, Any], env: Mapping[str, str] | None,
                      torch_cuda_arch_list: str) -> dict[str, str]:
    """Step 2, the Python environment's variables: the variant's defaults, then the user's (refused when this
    vLLM release no longer knows them), then ``TORCH_CUDA_ARCH_LIST`` on cuda images.

    :raises ImageBuildError: a variable vLLM ``profile['vllm_version']`` removed.
    """
    variant = str(profile["variant"])
    merged_env = dict(DEFAULT_ENV[variant])
    if profile.get("base_kind") == "project":  # what the nvidia/cuda base would have set
        merged_env.update(NVIDIA_CONTAINER_ENV)
    merged_env.update({str(k): str(v) for k, v in (env or {}).items()})
    gone = removed_env_for(str(profile["vllm_version"]))
    removed = sorted(gone.keys() & merged_env.keys())
    if removed:
        instead = "; ".join(f"{name}: use {gone[name]}" for name in removed)
        raise ImageBuildError(
            f"{', '.join(removed)} no longer exist in vLLM {profile['vllm_version']}: remove them ({instead})"
        )
    if torch_cuda_arch_list and variant == "cuda":
        merged_env["TORCH_CUDA_ARCH_LIST"] = torch_cuda_arch_list
    return merged_env


def _forward_compat_step(profile: Mapping[str, Any], forward_compat: Mapping[str, Any] | None, sha256: str,
                         install_mode: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Forward compatibility (the image decision's ``forward_compat``, mode ``forward``): vLLM's switch and the wheel
    that carries NVIDIA's ``cuda-compat`` libraries (forward_compat.py ``compat_wheel``); ``({}, {})`` otherwise.

    :raises ImageBuildError: no libraries given (``cuda_compat_sha256`` empty), or the index install mode (the wheel
        exists only in the wheelhouse).
    """
    forward = dict(forward_compat or {})
    if forward.get("mode") != "forward":
        return {}, {}
    if not sha256:
        raise ImageBuildError(
            f"{forward.get('reason')}: the image needs NVIDIA's {forward.get('package')} libraries (libcuda.so.* of "
            f"driver {forward.get('compat_driver')}); NVIDIA's repository is not reachable and no PyPI wheel carries "
            "them: set vllm_image_cuda_compat_dir to a controller folder with the package's files (its "
            "/usr/local/cuda-X.Y/compat), or upgrade the host's driver")
    if install_mode != "wheelhouse":
        raise ImageBuildError("forward compatibility brings its libraries through the wheelhouse: set "
                              "vllm_image_install_mode: wheelhouse")
    wheel = fc.compat_wheel(str(profile["cuda_version"]), str(forward["compat_driver"]), str(profile["python_version"]))
    forward["env"] = {**dict(forward.get("env") or {}), "VLLM_CUDA_COMPATIBILITY_PATH": wheel["path"]}
    return forward, wheel


def _packages_step(profile: Mapping[str, Any], extra_index_urls: Sequence[str], ray: bool) -> dict[str, Any]:
    """Step 3, vLLM and torch: the exact requirements (with Ray's when asked), the indexes and the sdists.

    :raises ImageBuildError: Ray asked of a row without a Ray pin.
    """
    ray_requirements = _ray_requirements(profile) if ray else []
    return {
        "requirements": list(profile["requirements"]) + ray_requirements,
        "ray_requirements": ray_requirements,
        "indexes": list(profile.get("extra_index_urls") or []) + [u for u in extra_index_urls if u],
        "sdist_wheels": [str(x) for x in profile.get("sdist_wheels") or []],
    }


def _pip_download_args(profile: Mapping[str, Any], index_url: str, indexes: Sequence[str]) -> list[str]:
    """The controller's ``pip download`` options for the wheelhouse: the base's Python and every manylinux tag its
    glibc accepts (pip does not widen an explicit --platform)."""
    major, minor = (int(x) for x in str(profile.get("glibc") or "2.28").split(".")[:2])
    platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    pip_download = ["--only-binary=:all:", "--python-version", str(profile["python_version"]),
                    "--implementation", "cp"]
    for platform in platforms:
        pip_download += ["--platform", platform]
    if index_url:
        pip_download += ["--index-url", index_url]
    for url in indexes:
        pip_download += ["--extra-index-url", url]
    return pip_download


def _labels_step(profile: Mapping[str, Any], tag_inputs: Mapping[str, Any], tag: str, digest: str) -> dict[str, str]:
    """Step 4, the labels: what went in, readable from ``docker inspect`` (the tag and its digest included)."""
    labels = {
        "org.opencontainers.image.title": "vllm-fleet vLLM image",
        "org.opencontainers.image.version": str(profile["vllm_version"]),
        "org.opencontainers.image.base.name": str(tag_inputs["base_image"]),
        "org.vllm-fleet.image.tag": tag,
        "org.vllm-fleet.inputs.digest": digest,
        "org.vllm-fleet.variant": str(tag_inputs["variant"]),
        "org.vllm-fleet.profile": str(profile["key"]),
        "org.vllm-fleet.vllm.package": str(profile["vllm_package"]),
        "org.vllm-fleet.vllm.version": str(profile["vllm_version"]),
        "org.vllm-fleet.torch.version": str(profile["torch_version"]),
        "org.vllm-fleet.cuda.version": str(profile.get("cuda_version") or "none"),
        "org.vllm-fleet.driver.min": str(profile.get("min_driver") or "none"),
        "org.vllm-fleet.compute-capabilities": ",".join(profile.get("compute_capabilities") or []) or "none",
        "org.vllm-fleet.base.id": str(tag_inputs["base_image_id"]),
        "org.vllm-fleet.template.sha256": str(tag_inputs["template_sha256"]),
        "org.vllm-fleet.constraints.sha256": str(tag_inputs["constraints_sha256"]) or "none",
        "org.vllm-fleet.install-mode": str(tag_inputs["install_mode"]),
        "org.vllm-fleet.build-backend": str(tag_inputs["build_backend"]),
    }
    if tag_inputs.get("ray"):
        labels["org.vllm-fleet.ray"] = " ".join(tag_inputs["ray"])
    if tag_inputs.get("cuda_compat"):
        labels["org.vllm-fleet.cuda.forward-compat"] = str(tag_inputs["cuda_compat"]["package"])
    if profile.get("base_kind"):
        labels["org.vllm-fleet.base.kind"] = str(profile["base_kind"])
        labels["org.vllm-fleet.base.reason"] = str(profile.get("base_reason") or "")
    return labels


def build_plan(
    profile: Mapping[str, Any],
    *,
    repository: str,
    base_image: str,
    base_image_id: str,
    template_sha256: str,
    constraints_sha256: str = "",
    install_mode: str = "wheelhouse",
    index_url: str = "",
    extra_index_urls: Sequence[str] = (),
    uid: int = 1000,
    env: Mapping[str, str] | None = None,
    ca_bundle: bool = False,
    http_proxy: str = "",
    https_proxy: str = "",
    no_proxy: str = "",
    health_port: int = DEFAULT_SERVE_PORT,
    torch_cuda_arch_list: str = "",
    files_sha256: str = "",
    ray: bool = False,
    build_backend: str = "classic",
    forward_compat: Mapping[str, Any] | None = None,
    cuda_compat_sha256: str = "",
) -> dict[str, Any]:
    """Everything the role needs to render, tag and build one image, in four named steps: the base
    (:func:`_base_step`), the Python environment (:func:`_environment_step`), vLLM and torch
    (:func:`_packages_step`), then the tag over all their inputs and the labels (:func:`_labels_step`).

    :param ray: install Ray for the Ray launcher (``vllm_image_ray``): the row's ``ray_requirements`` join vLLM's in
        the same pip step, the wheelhouse download and the tag. Off, the plan is exactly the one without Ray.
    :param build_backend: ``buildkit`` (one stage, the wheelhouse bind-mounted) or ``classic`` (two stages), as
        backend.py ``choose_backend`` decided for the builder; an input of the tag (the layers differ).
    :param forward_compat: the image decision's ``forward_compat`` (forward_compat.py ``decide``, mode ``forward``):
        the image carries the ``cuda-compat`` libraries (the build context's ``cuda-compat/``, checksum
        ``cuda_compat_sha256``) at the decision's path and sets vLLM's switch; an input of the tag.

    :returns: ``{"tag", "ref", "repository", "inputs_digest", "tag_inputs", "render", "build_args",
              "pip_download", "sdist_wheels", "wheelhouse_name", "wheelhouse_digest", "wheelhouse_own_find_links"}``;
              ``sdist_wheels`` are
              built into the wheelhouse (``pip wheel --no-deps``) before the download, which finds them there.
    :raises ImageBuildError: unknown install mode, removed environment variables, bad uid/port, Ray asked of a row
        without a Ray pin.
    """
    _check_options(install_mode, uid, health_port, build_backend)
    base = _base_step(profile, base_image, base_image_id)
    variant = base["variant"]
    forward, compat_wheel = _forward_compat_step(profile, forward_compat, cuda_compat_sha256, install_mode)
    merged_env = _environment_step(profile, dict(forward.get("env") or {}) | dict(env or {}), torch_cuda_arch_list)
    packages = _packages_step(profile, extra_index_urls, ray)
    requirements, indexes = packages["requirements"], packages["indexes"]
    if compat_wheel:
        requirements.append(compat_wheel["requirement"])
    ray_requirements, sdist_wheels = packages["ray_requirements"], packages["sdist_wheels"]
    # ---- the tag: every input above (proxies excluded, tag.py), in the order the tag has always hashed them
    tag_inputs: dict[str, Any] = {
        "variant": variant,
        "profile": profile["key"],
        "vllm_version": profile["vllm_version"],
        "vllm_package": profile["vllm_package"],
        "torch_version": profile["torch_version"],
        "cuda_version": profile.get("cuda_version"),
        "python_version": profile["python_version"],
        "requirements": requirements,
        "base_image": base_image,
        "base_image_id": base_image_id,
        "template_sha256": template_sha256,
        "constraints_sha256": constraints_sha256,
        "install_mode": install_mode,
        "index_url": index_url,
        "extra_index_urls": indexes,
        "uid": int(uid),
        "env": merged_env,
        "health_port": int(health_port),
        "files_sha256": files_sha256,
        "build_args": {},
        # Everything else the template renders (package lists, removals, alias) is an input too.
        "packages": base["packages"],
        "metadata_alias_version": f"{profile['vllm_version']}+{variant}" if profile["vllm_package"] != "vllm" else "",
        "build_backend": build_backend,
    }
    if sdist_wheels:  # only where a row has them, so the other rows keep their tags
        tag_inputs["sdist_wheels"] = sdist_wheels
    if ray_requirements:  # only with Ray: without it the inputs (and so the tag) are the ones they always were
        tag_inputs["ray"] = ray_requirements
    if forward:  # only through forward compatibility, likewise
        tag_inputs["cuda_compat"] = {"package": forward.get("package"), "sha256": cuda_compat_sha256}
    build_args = {k: v for k, v in (("HTTP_PROXY", http_proxy), ("HTTPS_PROXY", https_proxy),
                                    ("NO_PROXY", no_proxy)) if v}
    tag = image_tag(tag_inputs)
    digest = inputs_digest(tag_inputs)
    labels = _labels_step(profile, tag_inputs, tag, digest)
    pip_download = _pip_download_args(profile, index_url, indexes)
    render = {
        "variant": variant,
        "profile": dict(profile),
        "base_image": base_image,
        "install_mode": install_mode,
        "requirements": requirements,
        "index_url": index_url,
        "extra_index_urls": indexes,
        "constraints": bool(constraints_sha256),
        "ca_bundle": bool(ca_bundle),
        "uid": int(uid),
        "env": dict(sorted(merged_env.items())),
        "labels": labels,
        "build_packages": tag_inputs["packages"]["build"],
        "runtime_packages": tag_inputs["packages"]["runtime"],
        # BuildKit's one stage installs both lists (the runtime's first; venv tooling is a few MB).
        "single_stage_packages": tag_inputs["packages"]["runtime"]
        + [p for p in tag_inputs["packages"]["build"] if p not in tag_inputs["packages"]["runtime"]],
        "build_backend": build_backend,
        # Everything `pip install` takes before the requirements, the same in both layouts.
        "pip_install_options": _pip_install_options(install_mode, index_url, indexes, bool(constraints_sha256)),
        "remove_packages": tag_inputs["packages"]["remove"],
        "metadata_alias": bool(tag_inputs["metadata_alias_version"]),
        # vLLM detects its CPU build by "cpu" in version("vllm") (vllm/platforms/__init__.py).
        "metadata_alias_version": tag_inputs["metadata_alias_version"],
        # BuildKit: what the install step reads, bind-mounted from the build context for that step only.
        "install_mounts": [f"--mount=type=bind,source={source},target={target}" for source, target, wanted in (
            ("wheels", "/tmp/wheels", install_mode == "wheelhouse"),
            ("constraints.txt", "/tmp/constraints.txt", bool(constraints_sha256)),
            ("vllm_metadata_alias.py", "/tmp/vllm_metadata_alias.py", bool(tag_inputs["metadata_alias_version"])),
            ("ca-bundle.crt", "/tmp/vllm-fleet-build-ca.crt", bool(ca_bundle)),
        ) if wanted] if build_backend == "buildkit" else [],
        "health_port": int(health_port),
        # cuda images: `vllm --version` infers the device and fails on a builder without a GPU ("Failed to infer
        # device type", vllm/config/device.py:55, seen building the cu130 image here); import vLLM and torch instead.
        "cuda_import_check": CUDA_IMPORT_CHECK,
    }
    wheelhouse_digest = hashlib.sha256(
        json.dumps([pip_download, requirements, constraints_sha256] + ([sdist_wheels] if sdist_wheels else []))
        .encode("utf-8")
    ).hexdigest()[:16]
    return {
        "tag": tag,
        "ref": f"{repository}:{tag}",
        "repository": repository,
        "inputs_digest": digest,
        "tag_inputs": tag_inputs,
        "render": render,
        "build_args": build_args,
        "pip_download": pip_download,
        "sdist_wheels": sdist_wheels,
        # The project base's wheels are for another python: a folder of their own.
        "wheelhouse_name": f"{profile['vllm_version']}-{profile['key']}"
        + (f"-{profile['base_kind']}" if profile.get("base_kind") else ""),
        # A cuda wheelhouse must not see the controller's find-links: they may hold a +cpu torch of the same version,
        # which `torch==X` matches (PEP 440 ignores the local label) and pip prefers (+cpu sorts after X).
        "wheelhouse_own_find_links": variant == "cuda",
        # Forward compatibility: the wheel the role builds into the wheelhouse first ({} = none).
        "cuda_compat_wheel": compat_wheel,
        "wheelhouse_digest": wheelhouse_digest,
    }
