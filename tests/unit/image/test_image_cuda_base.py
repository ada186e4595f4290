"""The cuda image on the project's own debootstrap base (issue 31): the choice (vllm_image_cuda_base), what changes
in the plan (base, python, NVIDIA container environment, labels, tag, wheelhouse) and what does not; the in-image
check's fat binary reader on a constructed ELF."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.filter.image import vllm_image_select
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import get_profile

from ._image_render import BASE_ID, ROLE, render, template_sha256

ROOT = Path(__file__).resolve().parents[3]


def _plan(profile: dict[str, Any], **options: Any) -> dict[str, Any]:
    return image_build.build_plan(profile, repository="vllm-fleet/vllm",
                                  base_image=image_build.resolve_base_image(profile, "mirror.example:5000/"),
                                  base_image_id=BASE_ID, template_sha256=template_sha256(), **options)


def test_project_base_is_the_debootstrap_image_with_its_python_and_the_reason_in_the_labels() -> None:
    row = get_profile("cu130", "0.32.0").as_dict()
    assert row["project_python"] == "3.11"
    profile = image_build.for_cuda_base(row, "project")
    assert profile["base_image"] == "vllm-fleet/debian:bookworm" and profile["python_version"] == "3.11"
    assert profile["glibc"] == "2.36"
    plan = _plan(profile, build_backend="buildkit")
    assert plan["tag_inputs"]["base_image"] == "vllm-fleet/debian:bookworm"  # no registry mirror in front
    assert plan["pip_download"][:3] == ["--only-binary=:all:", "--python-version", "3.11"]
    assert "manylinux_2_36_x86_64" in plan["pip_download"] and "manylinux_2_39_x86_64" not in plan["pip_download"]
    env = plan["render"]["env"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    labels = plan["render"]["labels"]
    assert labels["org.vllm-fleet.base.kind"] == "project"
    assert "nvidia-* wheels" in labels["org.vllm-fleet.base.reason"]
    assert labels["org.vllm-fleet.cuda.version"] == "13.0"
    assert plan["wheelhouse_name"] == "0.32.0-cu130-project" and plan["wheelhouse_own_find_links"]
    dockerfile = render(plan)
    assert dockerfile.count("FROM vllm-fleet/debian:bookworm") == 1
    assert "vllm --version" not in dockerfile and "torch.version.cuda" in dockerfile


def test_nvidia_base_is_unchanged_and_tags_differ() -> None:
    row = get_profile("cu130", "0.32.0").as_dict()
    assert image_build.for_cuda_base(row, "nvidia") == row
    nvidia, project = _plan(row), _plan(image_build.for_cuda_base(row, "project"))
    assert nvidia["tag_inputs"]["base_image"] == "mirror.example:5000/nvidia/cuda:13.0.2-base-ubuntu24.04"
    assert "NVIDIA_VISIBLE_DEVICES" not in nvidia["render"]["env"]  # the nvidia/cuda image sets them itself
    assert "org.vllm-fleet.base.kind" not in nvidia["render"]["labels"]
    assert nvidia["tag"] != project["tag"] and nvidia["wheelhouse_name"] == "0.32.0-cu130"
    cpu = _plan(get_profile("cpu", "0.32.0").as_dict())
    assert not cpu["wheelhouse_own_find_links"]  # the cpu wheelhouse needs the host's +cpu torch


def test_user_env_still_wins_over_the_nvidia_defaults() -> None:
    profile = image_build.for_cuda_base(get_profile("cu130", "0.32.0").as_dict(), "project")
    plan = _plan(profile, env={"NVIDIA_VISIBLE_DEVICES": "0,1"})
    assert plan["render"]["env"]["NVIDIA_VISIBLE_DEVICES"] == "0,1"


def test_auto_takes_the_project_base_only_where_the_wheels_were_checked() -> None:
    checked = get_profile("cu130", "0.32.0").as_dict()
    unchecked = get_profile("cu130", "0.33.0").as_dict()
    assert image_build.for_cuda_base(checked, "auto")["base_kind"] == "project"
    # auto without the project base on the builder's engine: the nvidia/cuda image, as before
    assert image_build.for_cuda_base(checked, "auto", project_present=False) == checked
    assert image_build.for_cuda_base(checked, "project", project_present=False)["base_kind"] == "project"
    assert image_build.for_cuda_base(unchecked, "auto") == unchecked
    with pytest.raises(image_build.ImageBuildError, match="vllm_image_cuda_base: nvidia"):
        image_build.for_cuda_base(unchecked, "project")
    with pytest.raises(image_build.ImageBuildError, match="not one of"):
        image_build.for_cuda_base(checked, "ubuntu")
    cpu = get_profile("cpu", "0.32.0").as_dict()
    assert image_build.for_cuda_base(cpu, "project") == cpu


def test_the_filter_resolves_the_base_and_the_role_passes_the_choice() -> None:
    decision = vllm_image_select("0.32.0", "580.159.04", ["9.0"], cuda_base="auto",
                                 cpu_base_image="local/debian:12")
    assert decision["base_kind"] == "project" and decision["base_image"] == "local/debian:12"
    assert vllm_image_select("0.32.0", "580.159.04", ["9.0"])["base_kind"] == "nvidia"
    assert vllm_image_select("0.32.0", "580.159.04", ["9.0"], cuda_base="auto",
                             project_base_present=False)["base_kind"] == "nvidia"
    tasks = (ROLE / "tasks" / "main.yml").read_text()
    assert "cuda_base=vllm_image_cuda_base" in tasks and "base_kind == 'nvidia'" in tasks
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    for name in ("vllm_image_cuda_base", "vllm_image_forward_compat", "vllm_image_cuda_compat_dir"):
        assert specs[name]["default"] == defaults[name], name


# ---- the in-image check's fat binary reader -----------------------------------------------------------------------

def _check_module() -> Any:
    spec = importlib.util.spec_from_file_location("image_cuda_check", ROOT / "scripts" / "image_cuda_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(kind: int, arch: int, payload: bytes) -> bytes:
    header = struct.pack("<HHIQ", kind, 0x101, 64, len(payload)) + b"\0" * 12 + struct.pack("<I", arch)
    return header.ljust(64, b"\0") + payload


def _elf_with(section_name: bytes, data: bytes) -> bytes:
    """A minimal ELF64 with a null section, the named section and the section-name table."""
    names = b"\0" + section_name + b"\0.shstrtab\0"
    body_off = 64
    data_off, names_off = body_off, body_off + len(data)
    shoff = (names_off + len(names) + 7) // 8 * 8
    fields = (3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)  # type, machine, version, entry, phoff, shoff, ...
    head = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9 + struct.pack("<HHIQQQIHHHHHH", *fields)
    out = bytearray(head.ljust(64, b"\0") + data + names)
    out += b"\0" * (shoff - len(out))
    for name_off, off, size in ((0, 0, 0), (1, data_off, len(data)), (len(section_name) + 2, names_off, len(names))):
        out += struct.pack("<IIQQQQIIQQ", name_off, 1, 0, 0, off, size, 0, 0, 1, 0)
    return bytes(out)


def test_fatbin_reader_lists_cubin_and_ptx_architectures(tmp_path: Path) -> None:
    check = _check_module()
    entries = _entry(2, 90, b"cubin90!") + _entry(2, 120, b"cubin120") + _entry(1, 75, b"ptx75...")
    container = struct.pack("<IHHQ", check.FATBIN_MAGIC, 1, 16, len(entries)) + entries
    second = struct.pack("<IHHQ", check.FATBIN_MAGIC, 1, 16, len(_entry(2, 100, b"cubin100")))
    section = container + b"\0" * 8 + second + _entry(2, 100, b"cubin100")
    so = tmp_path / "_C.abi3.so"
    so.write_bytes(_elf_with(b".nv_fatbin", section))
    with so.open("rb") as handle:
        found = check.elf_section(handle, ".nv_fatbin")
        assert check.elf_section(handle, ".text") is None
    assert found == section
    assert check.fatbin_archs(found) == {"sm": [90, 100, 120], "ptx": [75]}
    assert check.fatbin_archs(b"\0" * 64) == {"sm": [], "ptx": []}
