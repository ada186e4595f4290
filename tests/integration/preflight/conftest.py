"""Run ansible-playbook against the small inventories under tests/fixtures/preflight and parse the result."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests/fixtures/preflight"
ANSIBLE_PLAYBOOK = ROOT / ".venv/bin/ansible-playbook"
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)",
    re.M,
)
_PLAY = re.compile(r"^PLAY \[(?P<name>[^\]]*)\]", re.M)


@dataclass
class Run:
    rc: int
    output: str
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    plays: list[str] = field(default_factory=list)

    @property
    def flat(self) -> str:
        """The output with whitespace collapsed and YAML quote-escapes undone (messages wrap in YAML)."""
        return re.sub(r"\s+", " ", self.output.replace("''", "'"))


def run_playbook(playbook: str, inventory: Path, artifacts: Path, extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None, timeout: int = 300) -> Run:
    env = dict(os.environ)
    env.update({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "PYTHONUNBUFFERED": "1"})
    env.pop("VLLM_FLEET_API_KEY", None)
    env.update(extra_env or {})
    cmd = [str(ANSIBLE_PLAYBOOK), playbook, "-i", str(inventory),
           "-e", f"vllm_fleet_artifacts_dir={artifacts}", *(extra_args or [])]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    out = proc.stdout + proc.stderr
    recap = {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
             for m in _RECAP.finditer(out)}
    return Run(proc.returncode, out, recap, [m["name"] for m in _PLAY.finditer(out)])


@pytest.fixture(scope="session")
def playbook() -> Callable[..., Run]:
    """``playbook(playbook, inventory, artifacts, extra_env=None, extra_args=None)`` → :class:`Run`."""
    return run_playbook
