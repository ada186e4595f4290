"""Content-addressed image tags for the vllm_image role (pure, standard library only).

The tag is derived from everything that decides what ends up in the image: the versions (vLLM, PyTorch,
CUDA), the base image *and its image id*, the Dockerfile template's checksum, the pinned requirement set
(constraints file checksum) and the build arguments.  Same inputs → same tag → nothing to build; one changed
input → a new tag → exactly one build.

Proxy settings are deliberately *not* inputs: like Docker's predefined proxy build arguments, they change how
packages are fetched, not what gets installed.  A CA bundle is only used while building and is excluded too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

#: Build arguments that never influence the image content (Docker excludes them from the cache too).
EXCLUDED_BUILD_ARGS = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY"}
    | {"http_proxy", "https_proxy", "no_proxy", "ftp_proxy", "all_proxy"}
)

REQUIRED_INPUTS = ("variant", "profile", "vllm_version", "torch_version", "base_image", "base_image_id",
                   "template_sha256")

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class ImageTagError(ValueError):
    """The inputs cannot produce a tag; the message names what is missing."""


def canonical_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs that count, normalised: proxy build args dropped, keys sorted by JSON encoding.

    :raises ImageTagError: a required input is missing or empty.
    """
    missing = [name for name in REQUIRED_INPUTS if not inputs.get(name)]
    if missing:
        raise ImageTagError(f"image tag inputs lack {', '.join(missing)}")
    data = dict(inputs)
    build_args = dict(data.get("build_args") or {})
    data["build_args"] = {k: str(v) for k, v in build_args.items() if k not in EXCLUDED_BUILD_ARGS}
    return data


def inputs_digest(inputs: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of the inputs."""
    blob = json.dumps(canonical_inputs(inputs), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def image_tag(inputs: Mapping[str, Any], digest_length: int = 12) -> str:
    """``<vllm_version>-<profile>-<digest>``, e.g. ``0.32.0-cpu-1a2b3c4d5e6f``.

    The readable prefix is for humans; the digest alone carries identity.  Characters Docker does not
    allow in tags (``+`` in ``2.13.0+cpu`` …) become ``_``; the result is at most 128 characters.

    :raises ImageTagError: missing inputs or an unusable digest length.
    """
    if not 8 <= digest_length <= 64:
        raise ImageTagError("digest_length must be between 8 and 64")
    digest = inputs_digest(inputs)[:digest_length]
    prefix = _TAG_UNSAFE.sub("_", f"{inputs['vllm_version']}-{inputs['profile']}")
    return f"{prefix[: 127 - digest_length]}-{digest}"


def image_reference(repository: str, inputs: Mapping[str, Any]) -> str:
    """``repository:tag`` for these inputs."""
    if not repository or ":" in repository.rsplit("/", 1)[-1]:
        raise ImageTagError(f"repository {repository!r} must be a name without a tag")
    return f"{repository}:{image_tag(inputs)}"
