"""The fleet lab's model staged through site.yml (issue 32), from the lab's HTTP mirror (conftest.py).

- the fixture's first site.yml is cut mid-transfer (the mirror closes model.safetensors after 1 MiB): every host
  fails at the stage saying so, site.yml stops there and no vLLM container exists;
- the next site.yml resumes each host's transfer with ``Range: bytes=1048576-`` (the mirror's log), prints each
  host's progress while it downloads, verifies every sha256, and each replica mounts and serves the staged
  revision's directory;
- ``site.yml --check --diff`` of a new revision lists each host's download (files, bytes) and changes nothing;
- on the running fleet, a revision whose checkpoint the mirror serves corrupted is refused on every host: site.yml
  stops at the stage, the replicas are not touched (same container, same start) and the served revision stays;
- a host whose model root is a 1 MiB tmpfs is refused by the stage's fleet check before any host changes.
The second run (changed=0) and ``--check --diff`` of the lab, stage included, are test_fleet_lab.py's.
Figures go to artifacts/deploy/fleet-lab.json ("staging") and the test output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from .._mirror import tiny_safetensors
from .conftest import HOSTS, SERVED, STAGE_RATE, Lab, content_revision, inspect, model_files, ok
from .test_fleet_lab import _figure

pytestmark = pytest.mark.integration

CHECKPOINT = "model.safetensors"
SMALL_HOST = sorted(HOSTS)[-1]
LATER_PLAYS = ("PLAY [Provision", "PLAY [Build the vLLM image", "PLAY [Deploy |", "PLAY [Monitoring |")


def _staged(lab: Lab, host: str) -> Path:
    return lab.workdir / "models" / host


def _failures(out: str) -> dict[str, str]:
    """Each failed host's result block (YAML callback), its lines joined: host -> text."""
    blocks = re.findall(r"^fatal: \[([^\]]+)\]: FAILED! => ?\n((?:    .*\n?)*)", out, flags=re.M)
    return {host: " ".join(block.split()) for host, block in blocks}


def _untouched() -> dict[str, tuple[str, str, int]]:
    return {h: (inspect(h)["Id"], inspect(h)["State"]["StartedAt"], inspect(h)["RestartCount"]) for h in HOSTS}


def test_an_interrupted_transfer_stops_site_before_any_container_then_resumes(lab: Lab) -> None:
    files = model_files()
    total = sum(len(d) for d in files.values())
    size, cut = len(files[CHECKPOINT]), lab.mirror.cut_at
    revision = content_revision(files)
    assert lab.interrupted is not None and lab.first is not None
    out = lab.interrupted.stdout + lab.interrupted.stderr
    assert lab.interrupted.returncode != 0, out[-3000:]
    failed = _failures(out)
    assert sorted(failed) == sorted(HOSTS), out[-4000:]
    for host, text in failed.items():
        assert f"{CHECKPOINT}: the transfer was interrupted after {cut} of {size} bytes" in text, (host, text)
    assert lab.interrupted_containers == [], "a failed stage must stop site.yml before any container"
    assert not [p for p in LATER_PLAYS if p in out], out[-3000:]

    out = ok(lab.first)
    flat = " ".join(out.split())  # the YAML callback wraps long messages
    # One whole-file GET per host in the cut run; the next run asks each host's mirror for the rest only: the 1 MiB
    # partial file was kept and is resumed.
    assert sorted(lab.mirror.requests(CHECKPOINT)) == [""] * len(HOSTS) + [f"bytes={cut}-"] * len(HOSTS)
    # The files before the checkpoint (the manifest's order) were complete in the cut run: the rest of the
    # checkpoint and the files after it are downloaded now.
    before_cut = sum(len(d) for name, d in files.items() if name < CHECKPOINT)
    rest = total - before_cut - cut
    assert flat.count(f"{rest} bytes downloaded of {total} ({cut} resumed)") == len(HOSTS), flat[-4000:]
    for host in HOSTS:
        # Progress while it ran: lines with growing bytes, ending verified at the total.
        done = [int(n) for n in re.findall(rf"ok: \[{host}\] => \(item={SERVED}@{revision}: \w+ (\d+) of {total} bytes",
                                           out)]
        assert len(done) >= 2 and done == sorted(done) and done[0] < total == done[-1], (host, done)
        assert f"ok: [{host}] => (item={SERVED}@{revision}: verified {total} of {total} bytes (100 %)" in out
        root = _staged(lab, host)
        assert os.readlink(root / SERVED) == f".revisions/{SERVED}/{revision}"
        for name, data in files.items():
            staged = root / ".revisions" / SERVED / revision / name
            assert hashlib.sha256(staged.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest(), (host, name)
    _check_served(lab, revision)
    seconds = re.findall(rf"{SERVED}@{revision}: {rest} bytes downloaded of {total} \({cut} resumed\) in ([\d.]+) s",
                         flat)
    _figure("staging", {"hosts": len(HOSTS), "bytes_per_host": total, "checkpoint_bytes": size,
                        "rate_bytes_per_host": STAGE_RATE, "interrupted_after": cut, "bytes_in_cut_run_per_host": before_cut + cut,
                        "bytes_in_resumed_run_per_host": rest,
                        "host_transfer_seconds": [float(s) for s in seconds],
                        "first_converge_seconds": round(lab.first_seconds)})


def _check_served(lab: Lab, revision: str) -> None:
    """Each replica mounts the staged revision's directory, the one its record names, and serves the model."""
    records = lab.records()
    for host in HOSTS:
        launch = records[host]["launch"]
        staged = str(_staged(lab, host) / ".revisions" / SERVED / revision)
        assert launch["model_dir"] == staged, (host, launch["model_dir"])
        mounts = {m["Destination"]: m for m in inspect(host)["Mounts"]}
        assert mounts[launch["model_mount"]]["Source"] == staged
        assert inspect(host)["State"]["Health"]["Status"] == "healthy"


def test_check_diff_of_a_new_revision_lists_the_download_and_changes_nothing(lab: Lab) -> None:
    good = model_files()
    revision = content_revision(good)
    new = dict(good, **{CHECKPOINT: tiny_safetensors(json.loads(good["config.json"]), seed=34)})
    new_revision = content_revision(new)
    before, gets = _untouched(), len(lab.mirror.requests(CHECKPOINT))
    lab.mirror.publish(new_revision, new)
    try:
        out = ok(lab.play("--check", "--diff"))
    finally:
        lab.mirror.publish(revision, good)
    assert out.count(f"+  download {CHECKPOINT} ({len(new[CHECKPOINT])} bytes)") == len(HOSTS), out[-4000:]
    for host in HOSTS:
        root = _staged(lab, host)
        assert f"-{root / SERVED} -> {revision}" in out and f"+{root / SERVED} -> {new_revision}" in out, out[-4000:]
        assert not (root / ".revisions" / SERVED / new_revision).exists()
        assert os.readlink(root / SERVED) == f".revisions/{SERVED}/{revision}"
    assert len(lab.mirror.requests(CHECKPOINT)) == gets, "check mode downloads nothing"
    assert _untouched() == before


def test_a_corrupted_revision_is_refused_and_no_replica_is_touched(lab: Lab) -> None:
    good = model_files()
    revision = content_revision(good)
    new = dict(good, **{CHECKPOINT: tiny_safetensors(json.loads(good["config.json"]), seed=33)})
    bad = bytearray(new[CHECKPOINT])
    bad[len(bad) // 2] ^= 0xFF
    before = _untouched()
    lab.mirror.publish(content_revision(new), new, served={CHECKPOINT: bytes(bad)})
    try:
        result = lab.play()
    finally:
        lab.mirror.publish(revision, good)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    failed = _failures(out)
    assert sorted(failed) == sorted(HOSTS), out[-4000:]
    for host, text in failed.items():
        assert f"{CHECKPOINT}: refused, the bytes do not match the published checksum" in text, (host, text)
    assert not [p for p in LATER_PLAYS if p in out], out[-3000:]
    assert _untouched() == before
    for host in HOSTS:
        assert os.readlink(_staged(lab, host) / SERVED) == f".revisions/{SERVED}/{revision}"
        assert not (_staged(lab, host) / ".revisions" / SERVED / content_revision(new) / CHECKPOINT).exists()


def test_a_host_without_disk_space_is_refused_before_any_host_changes(lab: Lab) -> None:
    small = Path(tempfile.mkdtemp(prefix="vf-lab-small-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    extra = lab.workdir / "small-host.yml"
    extra.write_text(yaml.safe_dump({"all": {"hosts": {SMALL_HOST: {"vllm_fleet_model_root": str(small)}}}}))
    before = _untouched()
    try:
        t0 = time.monotonic()
        result = lab.play("-i", str(extra))
        seconds = time.monotonic() - t0
        listing = os.listdir(small)
    finally:
        subprocess.run(["umount", str(small)], check=False)
        small.rmdir()
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert re.search(rf"{SMALL_HOST}: {SERVED} needs \d+ bytes at {small} \(\d+ of files \+ \d+ margin\), \d+ are "
                     "free: free space, or set vllm_fleet_model_root to a larger disk", out), out[-3000:]
    # Refused in the check play: no host ran the stage role, nothing was written, no replica touched.
    assert "PLAY [Stage | Put the model on the hosts" not in out and listing == []
    assert not [p for p in LATER_PLAYS if p in out], out[-3000:]
    assert _untouched() == before
    print(f"\n[fleet-lab] no-disk refusal in {seconds:.0f} s")
