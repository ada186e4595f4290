"""A GGUF or other binary file given as the model: one ModelFilesError line (and preflight's one line naming
the host), never a raw UnicodeDecodeError."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import planning as fp

ROOT = Path(__file__).resolve().parents[3]
T4 = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/t4-a.json").read_text())
FIX = "give a Hugging Face model directory with its config.json (the planner reads config.json)"
# A GGUF v3 header (magic, version, tensor count, metadata count) and some non-UTF-8 weight bytes.
GGUF = b"GGUF" + struct.pack("<IQQ", 3, 291, 24) + bytes(range(256)) * 4


def test_a_gguf_file_as_the_model(tmp_path: Path) -> None:
    path = tmp_path / "llama-3.1-8b.Q4_K_M.gguf"
    path.write_bytes(GGUF)
    with pytest.raises(ModelFilesError) as info:
        load_model(str(path))
    assert str(info.value) == f"'{path}' is a GGUF checkpoint, not a config.json: {FIX}"


def test_a_model_directory_whose_config_json_is_binary(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(ModelFilesError) as info:
        load_model(str(tmp_path))
    assert str(info.value) == f"'{tmp_path / 'config.json'}' in the model directory is a binary file, not a config.json: {FIX}"


def test_latin1_text_is_not_utf8(tmp_path: Path) -> None:
    """No NUL byte in the first 4 KiB but not UTF-8 either: the decode error becomes the same one line."""
    (tmp_path / "config.json").write_bytes('{"name": "café"}'.encode("latin-1"))
    with pytest.raises(ModelFilesError, match=r"is not UTF-8 text \(a binary file\?\), not a config.json: give a "):
        load_model(str(tmp_path))


def test_preflight_names_the_host(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(GGUF)
    answer = fp.try_plan(T4, str(path), "t4-a")
    assert answer["plan"] is None
    assert answer["error"] == f"t4-a: '{path}' is a GGUF checkpoint, not a config.json: {FIX}"


def test_a_text_config_still_loads(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "name": "café"}), encoding="utf-8")
    config, _total, model_dir = load_model(str(tmp_path))
    assert config["name"] == "café" and model_dir == str(tmp_path)
