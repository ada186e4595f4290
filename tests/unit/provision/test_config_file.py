"""vllm_fleet.fleet.config_file through real Ansible on localhost: one round trip per file, template's semantics.

The provisioning roles write their configuration files with it (README, "Ansible at fleet scale"); what they rely
on: the same bytes as ``ansible.builtin.template``, ``changed`` only when content or attributes differ, check mode
that writes nothing, ``--diff`` that shows the change, and a clear error when the folder is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
ANSIBLE_BIN = Path(sys.executable).parent

TEMPLATE = '{\n  "log-opts": {{ opts | to_json }},\n  "live-restore": true\n}\n'


def _play(tmp_path: Path, dest: Path, mode: str, opts: dict[str, str], *args: str) -> tuple[int, str, list[Any]]:
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "daemon.json.j2").write_text(TEMPLATE)
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{
        "hosts": "localhost", "connection": "local", "gather_facts": False, "vars": {"opts": opts},
        "tasks": [
            {"name": "one round trip", "vllm_fleet.fleet.config_file": {
                "dest": str(dest), "mode": mode,
                "content": "{{ lookup('ansible.builtin.template', 'daemon.json.j2') }}"}},
            {"name": "reference", "ansible.builtin.template": {"src": "daemon.json.j2", "dest": f"{dest}.template",
                                                               "mode": mode}},
        ]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([str(ANSIBLE_BIN / "ansible-playbook"), str(play), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=120)
    try:
        plays = json.loads(proc.stdout)["plays"]
        results = [task["hosts"]["localhost"] for task in plays[0]["tasks"]]
    except (ValueError, KeyError, IndexError):
        results = []
    return proc.returncode, proc.stdout + proc.stderr, results


def test_writes_what_template_writes_then_reports_no_change(tmp_path: Path) -> None:
    dest = tmp_path / "daemon.json"
    rc, out, (first, _ref) = _play(tmp_path, dest, "0640", {"max-size": "100m"})
    assert rc == 0, out
    assert first["changed"] and first["content_changed"], first
    assert dest.read_bytes() == Path(f"{dest}.template").read_bytes()
    assert oct(dest.stat().st_mode & 0o777) == "0o640"
    rc, out, (second, _ref) = _play(tmp_path, dest, "0640", {"max-size": "100m"})
    assert rc == 0 and not second["changed"], second


def test_check_mode_writes_nothing_and_diff_shows_the_change(tmp_path: Path) -> None:
    dest = tmp_path / "daemon.json"
    assert _play(tmp_path, dest, "0644", {"max-size": "100m"})[0] == 0
    before = dest.read_bytes()
    rc, out, (result, _ref) = _play(tmp_path, dest, "0644", {"max-size": "200m"}, "--check", "--diff")
    assert rc == 0, out
    assert result["changed"] and result["content_changed"], result
    assert dest.read_bytes() == before
    diff = result["diff"] if isinstance(result["diff"], dict) else result["diff"][0]
    assert '"max-size": "100m"' in diff["before"] and '"max-size": "200m"' in diff["after"], diff


def test_check_mode_on_a_new_file_reports_a_change_and_creates_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "new.json"
    rc, out, (result, _ref) = _play(tmp_path, dest, "0644", {"max-size": "1m"}, "--check")
    assert rc == 0 and result["changed"], out
    assert not dest.exists()


def test_an_attribute_alone_is_a_change(tmp_path: Path) -> None:
    dest = tmp_path / "daemon.json"
    assert _play(tmp_path, dest, "0644", {"max-size": "100m"})[0] == 0
    rc, _out, (result, _ref) = _play(tmp_path, dest, "0600", {"max-size": "100m"})
    assert rc == 0 and result["changed"] and not result["content_changed"], result
    assert oct(dest.stat().st_mode & 0o777) == "0o600"


def test_a_missing_folder_is_an_error_that_says_so(tmp_path: Path) -> None:
    dest = tmp_path / "absent" / "daemon.json"
    rc, out, _results = _play(tmp_path, dest, "0644", {"max-size": "100m"})
    assert rc != 0
    assert f"{dest.parent} does not exist: create it before writing {dest}" in out
