"""The module through real Ansible (FQCN resolution via ansible.cfg's collections_path): run, check mode, rerun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ANSIBLE = ROOT / ".venv" / "bin" / "ansible"


def adhoc(path: Path, *flags: str) -> dict[str, object]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    done = subprocess.run(
        [str(ANSIBLE), "localhost", "-c", "local", "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "vllm_fleet.fleet.tiny_model",
         "-a", f"path={path}", *flags],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


def test_check_mode_then_apply_then_idempotent(tmp_path: Path) -> None:
    target = tmp_path / "tiny"
    checked = adhoc(target, "--check", "--diff")
    assert checked["changed"] is True and not target.exists()
    applied = adhoc(target)
    assert applied["changed"] is True
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    assert adhoc(target)["changed"] is False
