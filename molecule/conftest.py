"""Shared helpers for the provisioning scenarios' testinfra verifiers (run by `molecule verify`).

`run_playbook` drives ansible-playbook against the scenario's own instances, with molecule's inventory
and environment, and parses PLAY RECAP: used for the "--check on a converged host reports changed=0"
tests and for handler behaviour that needs a second run with other variables.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

RECAP_RE = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)


@dataclass
class PlaybookRun:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    recap: dict[str, dict[str, int]] = {}
    for match in RECAP_RE.finditer(output):
        fields = match.groupdict()
        host = fields.pop("host")
        recap[host] = {k: int(v) for k, v in fields.items()}
    return recap


def project_dir() -> Path:
    return Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[1]))


def run_playbook(playbook: str | Path, *args: str, timeout: int = 900) -> PlaybookRun:
    inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    cmd = ["ansible-playbook", "-i", str(inventory), str(playbook), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    output = proc.stdout + proc.stderr
    return PlaybookRun(proc.returncode, output, parse_recap(output))


@pytest.fixture(scope="session")
def converge_playbook() -> Path:
    return project_dir() / ".config" / "molecule" / "converge.yml"


@pytest.fixture(scope="session")
def check_run(converge_playbook: Path) -> PlaybookRun:
    """The scenario's converge run again with --check --diff against the converged instance."""
    return run_playbook(converge_playbook, "--check", "--diff")
