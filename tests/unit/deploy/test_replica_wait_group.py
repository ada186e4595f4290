"""replica_wait's group signal: a node's failure reaches the other nodes of its multi-node group.

The nodes wait in separate worker processes of one ansible-playbook run; the signal is a file keyed by the run
(the workers' parent process) and the group attempt. The lab test (tests/integration/multinode) shows the effect:
rank 0 stops waiting as soon as the killed worker's gate fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "plugins" / "action"))
import replica_wait  # noqa: E402  (the action module, imported by path)


def test_same_run_and_key_share_one_file_other_attempts_do_not() -> None:
    update = replica_wait._signal_path("vf-mn-0,vf-mn-1 update")
    assert update == replica_wait._signal_path("vf-mn-0,vf-mn-1 update")
    assert update != replica_wait._signal_path("vf-mn-0,vf-mn-1 rollback")
    assert f"vllm-fleet-gates-{os.getppid()}" in update


def test_a_node_sees_the_other_nodes_failure_not_its_own(tmp_path: Path) -> None:
    path = tmp_path / "group.failed"
    assert replica_wait._peer_failure(str(path), "vf-mn-0") is None
    assert replica_wait._peer_failure(None, "vf-mn-0") is None
    path.write_text("vf-mn-1: vllm-tiny stopped or restarted while starting (exit code=137)")
    assert replica_wait._peer_failure(str(path), "vf-mn-1") is None
    assert replica_wait._peer_failure(str(path), "vf-mn-0") == (
        "vf-mn-1: vllm-tiny stopped or restarted while starting (exit code=137)")
