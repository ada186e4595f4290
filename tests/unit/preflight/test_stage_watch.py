"""The model_stage module's watch (state=watch): the progress lines a host prints while its async transfer runs.

The module runs as Ansible runs it (a Python process reading its arguments file); the progress file and the async
job's results file are written here the way the module's present run and Ansible's async_wrapper write them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
MODULE = ROOT / "plugins" / "modules" / "model_stage.py"


def _watch(tmp_path: Path, **args: Any) -> dict[str, Any]:
    params = {"state": "watch", "root": str(tmp_path / "models"), "name": "m", "revision": "r1", "run_id": "run-1",
              "job_file": str(tmp_path / "job"), **args}
    (tmp_path / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    proc = subprocess.run([sys.executable, str(MODULE), str(tmp_path / "args.json")], capture_output=True, text=True,
                          check=False, timeout=60)
    result: dict[str, Any] = json.loads(proc.stdout)
    assert not result.get("failed"), result
    return result


def _progress(tmp_path: Path, done: int, state: str = "running", run: str = "run-1") -> None:
    folder = tmp_path / "models" / ".revisions" / "m"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".r1.progress").write_text(json.dumps(
        {"run": run, "total_bytes": 1000, "done_bytes": done, "download_bytes": done - 100, "file": "w.bin",
         "started": 100.0, "updated": 102.0, "state": state}))


def test_a_step_returns_once_the_bytes_reach_its_share(tmp_path: Path) -> None:
    (tmp_path / "job").write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "1"}))
    _progress(tmp_path, 300)
    # 300 of 1000 bytes reach step 2 of 10 at once; the line says so (bytes, percent, rate over the elapsed time).
    result = _watch(tmp_path, step=2, steps=10)
    assert result["done"] is False and result["done_bytes"] == 300 and result["changed"] is False
    assert result["progress"] == "m@r1: downloading 300 of 1000 bytes (30 %), 200 this run at 0.0 MB/s, 2.0 s"
    # Step 4 waits for 400 bytes: the transfer gets there while the step waits.
    timer = threading.Timer(1.0, _progress, (tmp_path, 450))
    timer.start()
    start = time.monotonic()
    result = _watch(tmp_path, step=4, steps=10, after=300)
    timer.join()
    assert result["done_bytes"] == 450 and time.monotonic() - start >= 1.0
    # Bytes already past a step but not past the line before: it waits (no line twice), here until its timeout.
    result = _watch(tmp_path, step=3, steps=10, after=450, watch_timeout=0)
    assert result["done"] is False and result["done_bytes"] == 450


def test_the_job_ending_ends_the_watch_with_the_last_line(tmp_path: Path) -> None:
    _progress(tmp_path, 1000, state="done")
    (tmp_path / "job").write_text(json.dumps({"changed": True, "download_bytes": 900}))  # the module's result
    result = _watch(tmp_path, step=1, steps=10)
    assert result["done"] is True
    assert result["progress"].startswith("m@r1: verified 1000 of 1000 bytes (100 %)")
    # Killed at the async limit (async_wrapper's own result): ended, the line says where it stopped.
    _progress(tmp_path, 640)
    (tmp_path / "job").write_text(json.dumps({"msg": "Timeout exceeded", "failed": True, "child_pid": 1}))
    result = _watch(tmp_path, step=10, steps=10)
    assert result["done"] is True and result["done_bytes"] == 640


def test_another_runs_progress_is_not_this_runs(tmp_path: Path) -> None:
    _progress(tmp_path, 500, state="failed", run="run-0")  # an earlier, interrupted run's record
    (tmp_path / "job").write_text(json.dumps({"started": True, "finished": False}))
    result = _watch(tmp_path, step=1, steps=10, watch_timeout=0)
    assert result["done"] is False and result["progress"] == "m@r1: waiting for the transfer"
    # A verified revision: the job ends having written no progress.
    (tmp_path / "job").write_text(json.dumps({"changed": False}))
    result = _watch(tmp_path, step=1, steps=10)
    assert result["done"] is True and "nothing to download" in result["progress"]
