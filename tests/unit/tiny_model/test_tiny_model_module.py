"""The Ansible module vllm_fleet.fleet.tiny_model: idempotence, check mode, diff, partial rewrites."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.tiny_model import build_tiny_model
from ansible_collections.vllm_fleet.fleet.plugins.modules import tiny_model as module


def run(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_creates_the_directory_then_is_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "models" / "tiny"
    first = run(capsys, path=str(target))
    assert first["changed"] is True
    assert sorted(first["files"]) == sorted(build_tiny_model())
    assert first["config"]["architectures"] == ["LlamaForCausalLM"]
    for name, content in build_tiny_model().items():
        assert (target / name).read_text(encoding="utf-8") == content
        assert oct((target / name).stat().st_mode & 0o777) == "0o644"
    second = run(capsys, path=str(target))
    assert second["changed"] is False
    assert second["files"] == []


def test_check_mode_writes_nothing_and_reports_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "tiny"
    result = run(capsys, path=str(target), _ansible_check_mode=True, _ansible_diff=True)
    assert result["changed"] is True
    assert len(result["files"]) == 4
    assert not target.exists()
    config_diff = next(d for d in result["diff"] if d["after_header"].endswith("config.json"))
    assert config_diff["before"] == ""
    assert '"LlamaForCausalLM"' in config_diff["after"]


def test_only_the_differing_file_is_rewritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, path=str(tmp_path))
    (tmp_path / "config.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("mine\n", encoding="utf-8")
    untouched = (tmp_path / "tokenizer.json").stat().st_mtime_ns
    result = run(capsys, path=str(tmp_path), _ansible_diff=True)
    assert result["changed"] is True
    assert result["files"] == ["config.json"]
    assert result["diff"][0]["before"] == "{}\n"
    assert (tmp_path / "tokenizer.json").stat().st_mtime_ns == untouched
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == "mine\n"
    assert json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"] == 2


def test_check_mode_on_a_current_model_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, path=str(tmp_path))
    assert run(capsys, path=str(tmp_path), _ansible_check_mode=True)["changed"] is False


def test_mode_drift_is_fixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, path=str(tmp_path))
    os.chmod(tmp_path / "config.json", 0o600)
    result = run(capsys, path=str(tmp_path))
    assert result["changed"] is True and result["files"] == []
    assert oct((tmp_path / "config.json").stat().st_mode & 0o777) == "0o644"


def test_max_position_embeddings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, path=str(tmp_path), max_position_embeddings=1000)
    assert result["config"]["max_position_embeddings"] == 1000


def test_path_that_is_a_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x", encoding="utf-8")
    result = run(capsys, path=str(target))
    assert result["failed"] is True
    assert "is not a directory" in result["msg"]
