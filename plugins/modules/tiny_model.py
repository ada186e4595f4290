#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Module tiny_model: write a tiny, weightless Llama model directory for vLLM (documented below)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: tiny_model
short_description: Write a tiny, weightless Llama model directory that vLLM serves with C(--load-format dummy)
version_added: "0.1.0"
description:
  - Writes C(config.json), C(generation_config.json), C(tokenizer.json) and C(tokenizer_config.json) of a
    tiny C(LlamaForCausalLM) (hidden 256, 4 heads, 2 KV heads, head_dim 64, 2 layers, vocab 512, bf16)
    into O(path).
  - The tokenizer is a byte-level BPE in the Hugging Face C(tokenizers) format, trained deterministically
    on a built-in text; C(transformers.AutoTokenizer) loads it.
  - There are no weights; serve the directory with C(vllm serve DIR --load-format dummy) (random weights).
    It lets the CPU lane, CI and dry runs of a fleet work without any model download.
  - Only files whose content differs are written (atomically); other files in O(path) are left alone.
options:
  path:
    description: Directory to write the model into; created (with its parents) when missing.
    type: path
    required: true
  max_position_embeddings:
    description: The model's C(max_position_embeddings) (the longest context vLLM will allow).
    type: int
    default: 4096
  mode:
    description: Permissions of the written files.
    type: str
    default: "0644"
attributes:
  check_mode:
    support: full
    description: Reports which files would be written, without writing them.
  diff_mode:
    support: full
    description: Shows the files that would change.
author:
  - vllm-fleet contributors (@vllm-fleet)
"""

EXAMPLES = r"""
- name: Generate the tiny model the CPU lane serves
  vllm_fleet.fleet.tiny_model:
    path: /srv/models/tiny-llama

- name: Serve it
  ansible.builtin.command:
    cmd: vllm serve /srv/models/tiny-llama --load-format dummy --port 18000
"""

RETURN = r"""
path:
  description: The model directory.
  returned: always
  type: str
  sample: /srv/models/tiny-llama
files:
  description: Names of the files written (or, in check mode, that would be written).
  returned: always
  type: list
  elements: str
  sample: ["config.json", "tokenizer.json"]
config:
  description: The model's config.json as a dict.
  returned: always
  type: dict
  sample: {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2}
"""

import json
import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.tiny_model import build_tiny_model


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return ""


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "max_position_embeddings": {"type": "int", "default": 4096},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    directory: str = module.params["path"]
    try:
        contents = build_tiny_model(max_position_embeddings=module.params["max_position_embeddings"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if os.path.exists(directory) and not os.path.isdir(directory):
        module.fail_json(msg=f"{directory} exists and is not a directory")

    result: dict[str, Any] = {
        "changed": False,
        "path": directory,
        "files": [],
        "config": json.loads(contents["config.json"]),
    }
    diffs = []
    for name, content in contents.items():
        target = os.path.join(directory, name)
        current = _read(target)
        if current != content:
            result["files"].append(name)
            diffs.append(
                {
                    "before_header": target,
                    "after_header": target,
                    "before": current if current is not None else "",
                    "after": content,
                }
            )
    if result["files"]:
        result["changed"] = True
        if module._diff:
            result["diff"] = diffs
        if not module.check_mode:
            os.makedirs(directory, exist_ok=True)
            for name in result["files"]:
                target = os.path.join(directory, name)
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(contents[name])
                module.atomic_move(tmp, target)
    for name in contents:  # permissions (check mode: only reported)
        target = os.path.join(directory, name)
        if os.path.exists(target):
            file_args = module.load_file_common_arguments({"path": target, "mode": module.params["mode"]})
            result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
