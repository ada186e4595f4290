"""Render the vllm_image Dockerfile template with Ansible's own filters (no Ansible run needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import jinja2
from ansible.plugins.filter.core import comment, quote, to_json
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat as image_compat

ROLE = Path(__file__).resolve().parents[3] / "roles" / "vllm_image"
TEMPLATE = ROLE / "templates" / "Dockerfile.j2"
BASE_ID = "sha256:" + "ab" * 32


def template_sha256() -> str:
    # The role hashes lookup('file') output, which strips the trailing newline.
    return hashlib.sha256(TEMPLATE.read_text().rstrip("\n").encode()).hexdigest()


def plan_for(decision: image_compat.ImageDecision, **options: Any) -> dict[str, Any]:
    profile = decision.profile.as_dict()
    kwargs: dict[str, Any] = {
        "repository": "vllm-fleet/vllm",
        "base_image": image_build.resolve_base_image(profile, options.pop("registry_mirror", "")),
        "base_image_id": BASE_ID,
        "template_sha256": template_sha256(),
    }
    kwargs.update(options)
    return image_build.build_plan(profile, **kwargs)


def render(plan: dict[str, Any]) -> str:
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters.update({"comment": comment, "quote": quote, "to_json": to_json})
    return env.from_string(TEMPLATE.read_text()).render(
        __vllm_image_render=plan["render"], ansible_managed="Ansible managed"
    )
