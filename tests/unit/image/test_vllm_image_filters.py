"""The thin filter wrappers (plugins/filter/image.py): same answers as the core, AnsibleFilterError on bad input."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.image import FilterModule

F = FilterModule().filters()


def test_select_r535_fallback_and_mirror() -> None:
    d = F["vllm_image_select"]("0.32.0", driver_version="535.261.03", compute_capabilities=["8.0"],
                               registry_mirror="mirror.example:5000")
    assert d["key"] == "cu121" and d["fallback"] is True and d["vllm_version"] == "0.6.3.post1"
    assert d["base_image"] == "mirror.example:5000/nvidia/cuda:12.2.2-base-ubuntu22.04"
    assert d["profile"]["requirements"] == ["vllm==0.6.3.post1", "torch==2.4.0"]


def test_select_cpu_with_base_override() -> None:
    d = F["vllm_image_select"]("0.32.0", variant="cpu", cpu_base_image="my/debian:12")
    assert d["key"] == "cpu" and d["base_image"] == "my/debian:12"


def test_select_refusal_is_a_filter_error() -> None:
    with pytest.raises(AnsibleFilterError, match="No vLLM image runs on driver 470"):
        F["vllm_image_select"]("0.32.0", driver_version="470.82.01", compute_capabilities=["8.0"])


def test_check() -> None:
    assert F["vllm_image_check"]("0.32.0", driver_version="580.159.04", compute_capabilities=["9.0"]) is None
    assert F["vllm_image_check"]("0.32.0", variant="cpu") is None
    msg = F["vllm_image_check"]("0.32.0", driver_version="535.261.03", compute_capabilities=["9.0"],
                                allow_fallback=False)
    assert msg and "575.51.03" in msg


def test_plan() -> None:
    profile = F["vllm_image_select"]("0.32.0", variant="cpu")["profile"]
    plan = F["vllm_image_plan"](profile, repository="vllm-fleet/vllm", base_image="vllm-fleet/debian:bookworm",
                                base_image_id="sha256:" + "1" * 64, template_sha256="a" * 64)
    assert plan["ref"].startswith("vllm-fleet/vllm:0.32.0-cpu-")
    with pytest.raises(AnsibleFilterError, match="VLLM_USE_V1"):
        F["vllm_image_plan"](profile, repository="r", base_image="b", base_image_id="i", template_sha256="t",
                             env={"VLLM_USE_V1": "1"})
