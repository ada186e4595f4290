"""``make site`` exactly as the README runs it: the embedded local default inventory (CPU lane, the generated tiny
model) ends with vLLM answering a completion on 127.0.0.1:18200, and a second ``make site`` changes nothing.

It runs the real Makefile target (its test-bed steps are already done by ``make testbed``, so they cost seconds)
and prints the two times the README's "Measured" table publishes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
ENDPOINT = "http://127.0.0.1:18200"
CONTAINER = "vllm"  # the role's default container name (inventories/local sets none)


def _make_site() -> tuple[subprocess.CompletedProcess[str], float]:
    # A make of its own: not a job of the `make test` that runs this suite (its jobserver and -j flags).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    start = time.monotonic()
    result = subprocess.run(["make", "--no-print-directory", "site"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=1800, check=False)
    return result, time.monotonic() - start


def _recap(out: str) -> dict[str, int]:
    match = re.search(r"^localhost\s*:\s*(.*)$", out.split("PLAY RECAP")[-1], flags=re.M)
    assert match, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


@pytest.fixture
def no_local_endpoint() -> Iterator[None]:
    subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True, check=False)
    yield None
    subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True, check=False)


def test_make_site_serves_and_a_second_run_changes_nothing(no_local_endpoint: None) -> None:
    first, first_s = _make_site()
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-6000:]
    assert _recap(out)["failed"] == 0
    body = json.dumps({"model": "tiny-model", "prompt": "The fleet", "max_tokens": 8, "temperature": 0}).encode()
    request = urllib.request.Request(f"{ENDPOINT}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    assert answer["choices"] and answer["usage"]["completion_tokens"] == 8, answer

    second, second_s = _make_site()
    out2 = second.stdout + second.stderr
    assert second.returncode == 0, out2[-6000:]
    changed = [line for line in out2.splitlines() if line.startswith("changed:")]
    assert _recap(out2)["changed"] == 0, "the second make site changed: " + "; ".join(changed)
    print(f"\n[site] make site (test bed up, image built): serving in {first_s:.0f} s; "
          f"second make site {second_s:.0f} s, changed=0")
