#!/usr/bin/python
# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Module model_stage: put one model revision's files on a host, verified, resumable, switched atomically."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage
short_description: Stage a model revision's files on the host (sha256-verified, resumable, atomic switch)
version_added: "0.1.0"
description:
  - Downloads each file of O(files) over HTTP(S) into C(<root>/.revisions/<name>/<revision>/), resuming a
    partial file with an HTTP C(Range) request, verifies its size and sha256, then points the symlink
    C(<root>/<name>) at that directory in one C(rename) (a reader sees the old revision or the new one, never
    a half-written one) and removes the oldest revisions past O(keep).
  - A revision already verified (its marker file lists the same files, sizes and digests) and in place changes
    nothing. In check mode nothing is written; the result and the diff say which files would download and how
    many bytes.
  - A file whose bytes do not match the sha256 it was published with is refused - the partial file is removed,
    the task fails naming the file, and the symlink keeps pointing at the previous revision.
  - O(state=probe) only reads - the free bytes at O(root) (its nearest existing parent), the revision in
    place, and whether O(probe_url) answers - for the stage playbook's fleet check before any host changes.
  - While it downloads, the module writes its progress (bytes on the host of the revision's total, this run's
    bytes, the file, the elapsed time) to C(<root>/.revisions/<name>/.<revision>.progress) at most twice a second,
    tagged with O(run_id). O(state=watch) reads it while a download runs as an async job (O(job_file)) - it waits
    until the bytes reach step O(step) of O(steps) of the total, or the job ends, and returns one progress line -
    the model_stage role loops it, so each host prints its bytes done / total while the transfer runs.
author:
  - vllm-fleet contributors (@vllm-fleet)
options:
  root:
    description: Directory under which models are staged (the symlink C(<root>/<name>) points at the newest verified revision).
    type: path
    required: true
  name:
    description: The model's directory name under O(root).
    type: str
    required: true
  revision:
    description: The revision (a Hub commit hash or the mirror manifest's revision); names the directory.
    type: str
    required: true
  files:
    description:
      - Each file as a dict with C(path), C(size), C(sha256) and C(url); C(path) is relative to the model directory.
    type: list
    elements: dict
    default: []
  headers:
    description: HTTP headers for the downloads (the Hub token's C(Authorization)); never logged.
    type: dict
    default: {}
  keep:
    description: How many revisions to keep on the host, the one in place included.
    type: int
    default: 2
  rate_bytes:
    description: Bandwidth limit per host in bytes per second (0 = unlimited).
    type: int
    default: 0
  timeout:
    description: Seconds to wait for the source on each request.
    type: int
    default: 60
  state:
    description:
      - C(present) stages the revision; C(probe) only reports free disk, the revision in place and reachability;
        C(watch) waits for the next progress step of a C(present) run started as an async job.
    type: str
    choices: [present, probe, watch]
    default: present
  run_id:
    description: Tags the progress a C(present) run writes; O(state=watch) reads only the progress of the same O(run_id).
    type: str
  job_file:
    description: With O(state=watch), the async job's results file (the job has ended when it no longer says started).
    type: path
  step:
    description: With O(state=watch), return once the bytes on the host reach O(step)/O(steps) of the total (or the job ends).
    type: int
    default: 1
  steps:
    description: With O(state=watch), the number of progress lines a download prints at most.
    type: int
    default: 1
  after:
    description:
      - With O(state=watch), the bytes the previous step returned; a step returns only once the bytes moved past
        them (or the job ended), so a transfer that jumps over several steps prints one line, not several.
    type: int
    default: -1
  watch_timeout:
    description: With O(state=watch), seconds to wait for the step before returning the progress so far.
    type: int
    default: 86400
  probe_url:
    description: With O(state=probe), a URL whose answer proves the source is reachable from this host.
    type: str
attributes:
  check_mode:
    support: full
    description: Reports the files and bytes that would download; writes nothing (no progress file either).
  diff_mode:
    support: full
    description: The revision in place before and after, and the files that would download.
"""

EXAMPLES = r"""
- name: Stage the model
  vllm_fleet.fleet.model_stage:
    root: /srv/models
    name: tiny-model
    revision: r1
    files:
      - {path: config.json, size: 612, sha256: "9f2c...", url: "http://127.0.0.1:18600/tiny/config.json"}
"""

RETURN = r"""
path:
  description: The symlink C(<root>/<name>) (the replicas mount RV(revision_dir), which their launch record names).
  returned: always
  type: str
revision_dir:
  description: The revision's directory.
  returned: always
  type: str
total_bytes:
  description: Bytes of the revision.
  returned: always
  type: int
download_bytes:
  description: Bytes downloaded by this run (would download, in check mode).
  returned: always
  type: int
resumed_bytes:
  description: Bytes of partial files kept from an interrupted run (not downloaded again).
  returned: always
  type: int
downloaded:
  description: The files downloaded (that would download, in check mode).
  returned: always
  type: list
pruned:
  description: Revisions removed past O(keep).
  returned: always
  type: list
seconds:
  description: Time spent downloading and verifying.
  returned: always
  type: float
free_bytes:
  description: Free bytes at O(root) (nearest existing parent).
  returned: always
  type: int
current_revision:
  description: The revision in place before this run (null when none).
  returned: always
  type: str
verified:
  description: With O(state=probe), whether O(revision) is in place and its marker matches O(files).
  returned: when probed
  type: bool
reachable:
  description: With O(state=probe) and O(probe_url), whether the source answered.
  returned: when probed
  type: bool
reach_error:
  description: Why the source did not answer.
  returned: when probed
  type: str
pending:
  description: In check mode, whether a real run would change the host (download, switch or prune).
  returned: in check mode
  type: bool
done:
  description: With O(state=watch), whether the staging job has ended.
  returned: when watched
  type: bool
progress:
  description: With O(state=watch), one line - bytes on the host of the total, percent, rate, elapsed seconds.
  returned: when watched
  type: str
done_bytes:
  description: With O(state=watch), bytes of the revision on the host (complete files and resumed partial ones).
  returned: when watched
  type: int
"""

import hashlib
import http.client
import json
import os
import shutil
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url

MARKER = ".vllm-fleet-verified"
CHUNK = 1 << 20
PROGRESS_EVERY_S = 0.5
WATCH_POLL_S = 0.25


def _free_bytes(path):
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    stat = os.statvfs(probe or "/")
    return stat.f_bavail * stat.f_frsize


def _digest(files):
    rows = sorted((str(f["path"]), int(f["size"]), str(f["sha256"])) for f in files)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _current(link):
    if not os.path.islink(link):
        return None
    return os.path.basename(os.readlink(link).rstrip("/"))


def _read_marker(rev_dir):
    try:
        with open(os.path.join(rev_dir, MARKER), encoding="utf-8") as handle:
            return json.load(handle).get("digest")
    except (OSError, ValueError, AttributeError):
        return None


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _job_ended(job_file):
    """An async job has ended once its results file no longer says started (the module's result, or the timeout's)."""
    data = _read_json(job_file) if job_file else None
    return data is not None and not (data.get("started") and not data.get("finished"))


def progress_line(progress):
    """``<done> of <total> bytes (<pct> %), <rate> MB/s, <elapsed> s`` from a progress record."""
    total = int(progress.get("total_bytes") or 0)
    done = int(progress.get("done_bytes") or 0)
    elapsed = max(float(progress.get("updated", 0)) - float(progress.get("started", 0)), 0.0)
    rate = int(progress.get("download_bytes") or 0) / elapsed / 1e6 if elapsed > 0 else 0.0
    percent = 100 * done // total if total else 100
    state = {"done": "verified", "failed": "stopped"}.get(str(progress.get("state")), "downloading")
    return (f"{state} {done} of {total} bytes ({percent} %), {int(progress.get('download_bytes') or 0)} this run at "
            f"{rate:.1f} MB/s, {elapsed:.1f} s")


def _hash_file(path, hasher):
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            hasher.update(block)


class Stager:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.root = self.params["root"]
        self.name = self.params["name"]
        self.revision = self.params["revision"]
        self.link = os.path.join(self.root, self.name)
        self.rev_parent = os.path.join(self.root, ".revisions", self.name)
        self.rev_dir = os.path.join(self.rev_parent, self.revision)
        self.progress_path = os.path.join(self.rev_parent, f".{self.revision}.progress")
        self.progress = None  # {run, total_bytes, done_bytes, download_bytes, file, started, updated, state}
        self.reported = 0.0

    def report(self, state="running", force=False):
        """Write the progress record (atomically, at most every PROGRESS_EVERY_S unless forced) for state=watch."""
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self.reported < PROGRESS_EVERY_S:
            return
        self.reported = now
        self.progress.update(state=state, updated=time.time())
        tmp = self.progress_path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(self.progress, handle)
            os.replace(tmp, self.progress_path)
        except OSError:
            pass  # progress is for the eyes only: never fail a transfer over it

    def _fail(self, msg, **extra):
        self.report("failed", force=True)
        self.module.fail_json(msg=msg, path=self.link, revision_dir=self.rev_dir, **extra)

    def _validate(self):
        if "/" in self.name or self.name in ("", ".", "..") or "/" in self.revision or self.revision in ("", ".", ".."):
            self._fail(f"name {self.name!r} and revision {self.revision!r} must be plain directory names")
        for entry in self.params["files"]:
            for key in ("path", "size", "sha256", "url"):
                if key not in entry:
                    self._fail(f"file entry {entry.get('path', entry)!r} has no {key}")
            rel = os.path.normpath(str(entry["path"]))
            if rel.startswith("..") or os.path.isabs(rel) or rel == MARKER:
                self._fail(f"file path {entry['path']!r} must stay inside the model directory")

    def todo(self):
        """(files to download with the bytes each still needs, resumable bytes) without writing anything."""
        pending, resumed = [], 0
        for entry in self.params["files"]:
            final = os.path.join(self.rev_dir, str(entry["path"]))
            size = int(entry["size"])
            if os.path.isfile(final) and os.path.getsize(final) == size:
                continue
            partial = final + ".partial"
            have = os.path.getsize(partial) if os.path.isfile(partial) else 0
            have = have if have <= size else 0
            resumed += have
            pending.append((entry, size - have))
        return pending, resumed

    def fetch(self, entry, final):
        """Download one file into final (resuming its .partial), verify size and sha256, rename into place."""
        size, expected = int(entry["size"]), str(entry["sha256"]).lower()
        partial = final + ".partial"
        os.makedirs(os.path.dirname(final), exist_ok=True)
        have = os.path.getsize(partial) if os.path.isfile(partial) else 0
        if have > size:
            os.remove(partial)
            have = 0
        hasher = hashlib.sha256()
        if have:
            _hash_file(partial, hasher)
        downloaded = 0
        rate = int(self.params["rate_bytes"] or 0)
        if have < size:
            headers = dict(self.params["headers"] or {})
            if have:
                headers["Range"] = f"bytes={have}-"
            try:
                response = open_url(str(entry["url"]), headers=headers, timeout=self.params["timeout"])
            except urllib.error.HTTPError as exc:
                self._fail(f"{entry['path']}: the source answered HTTP {exc.code} for {entry['url']}"
                           + (" (a gated model needs vllm_fleet_hf_token)" if exc.code in (401, 403) else ""))
            except (urllib.error.URLError, OSError, UrlConnectionError, SSLValidationError) as exc:
                self._fail(f"{entry['path']}: cannot reach {entry['url']}: {getattr(exc, 'reason', exc)}")
            with response:
                if have and response.status != 206:  # the server ignored Range: start again
                    if self.progress is not None:
                        self.progress["done_bytes"] -= have
                    have, hasher = 0, hashlib.sha256()
                    mode = "wb"
                else:
                    mode = "ab" if have else "wb"
                start = time.monotonic()
                with open(partial, mode) as out:
                    while True:
                        try:
                            block = response.read(CHUNK)
                        except (http.client.HTTPException, OSError) as exc:
                            out.flush()
                            self._fail(f"{entry['path']}: the transfer was interrupted after {have + downloaded} of "
                                       f"{size} bytes ({exc.__class__.__name__}): run again, it resumes from there",
                                       download_bytes=downloaded)
                        if not block:
                            break
                        out.write(block)
                        hasher.update(block)
                        downloaded += len(block)
                        if self.progress is not None:
                            self.progress["done_bytes"] += len(block)
                            self.progress["download_bytes"] += len(block)
                            self.report()
                        if rate:
                            ahead = downloaded / rate - (time.monotonic() - start)
                            if ahead > 0:
                                time.sleep(ahead)
        got_size = os.path.getsize(partial) if os.path.isfile(partial) else 0
        if got_size < size:  # the connection closed early: keep the partial file for the next run
            self._fail(f"{entry['path']}: the transfer was interrupted after {got_size} of {size} bytes (the source "
                       "closed the connection): run again, it resumes from there", download_bytes=downloaded)
        got = hasher.hexdigest()
        if got_size != size or got != expected:
            if os.path.isfile(partial):
                os.remove(partial)
            self._fail(f"{entry['path']}: refused, the bytes do not match the published checksum (sha256 {got}, "
                       f"{got_size} bytes; expected {expected}, {size} bytes): the source serves a corrupted or "
                       f"different file; fix the source or the manifest. Revision {self.revision} was not switched "
                       "into place")
        os.replace(partial, final)
        return downloaded

    def prune(self, keep):
        if not os.path.isdir(self.rev_parent):
            return []
        names = [n for n in os.listdir(self.rev_parent) if os.path.isdir(os.path.join(self.rev_parent, n))]
        names.sort(key=lambda n: os.path.getmtime(os.path.join(self.rev_parent, n)), reverse=True)
        current = _current(self.link)
        kept = [n for n in names if n == current][:1]
        for name in names:
            if len(kept) >= max(keep, 1):
                break
            if name not in kept:
                kept.append(name)
        pruned = sorted(n for n in names if n not in kept)
        if not self.module.check_mode:
            for name in pruned:
                shutil.rmtree(os.path.join(self.rev_parent, name))
                progress = os.path.join(self.rev_parent, f".{name}.progress")
                if os.path.isfile(progress):
                    os.remove(progress)
        return pruned

    def run(self):
        self._validate()
        files = self.params["files"]
        total = sum(int(f["size"]) for f in files)
        digest = _digest(files)
        previous = _current(self.link)
        result = {"changed": False, "path": self.link, "revision_dir": self.rev_dir, "total_bytes": total,
                  "download_bytes": 0, "resumed_bytes": 0, "downloaded": [], "pruned": [], "seconds": 0.0,
                  "free_bytes": _free_bytes(self.root), "current_revision": previous}
        if self.params["state"] == "watch":
            self.watch()
        if self.params["state"] == "probe":
            result["verified"] = previous == self.revision and _read_marker(self.rev_dir) == digest
            if self.params.get("probe_url"):
                result["reachable"], result["reach_error"] = self.probe(self.params["probe_url"])
            self.module.exit_json(**result)
        verified = _read_marker(self.rev_dir) == digest
        pending, resumed = ([], 0) if verified else self.todo()
        in_place = previous == self.revision and os.path.realpath(self.link) == os.path.realpath(self.rev_dir)
        result["download_bytes"] = sum(need for _entry, need in pending)
        result["resumed_bytes"] = resumed
        result["downloaded"] = [str(e["path"]) for e, _need in pending]
        changed = not verified or not in_place
        if self.module.check_mode:
            result["pruned"] = self.prune(self.params["keep"])
            result["changed"] = result["pending"] = changed or bool(result["pruned"])
            if self.module._diff and result["changed"]:
                result["diff"] = {
                    "before": f"{self.link} -> {previous or '(none)'}\n",
                    "after": f"{self.link} -> {self.revision}\n" + "".join(
                        f"  download {e['path']} ({need} bytes)\n" for e, need in pending)
                    + f"  total to download: {result['download_bytes']} bytes of {total}\n"}
            self.module.exit_json(**result)
        start = time.monotonic()
        if not verified:
            os.makedirs(self.rev_dir, exist_ok=True)
            if self.params.get("run_id"):
                self.progress = {"run": self.params["run_id"], "total_bytes": total,
                                 "done_bytes": total - result["download_bytes"], "download_bytes": 0, "file": None,
                                 "started": time.time()}
                self.report(force=True)
            fetched = 0
            for entry, _need in pending:
                if self.progress is not None:
                    self.progress["file"] = str(entry["path"])
                fetched += self.fetch(entry, os.path.join(self.rev_dir, str(entry["path"])))
            # Files already complete before this run are verified too: the marker vouches for every byte.
            for entry in files:
                final = os.path.join(self.rev_dir, str(entry["path"]))
                if str(entry["path"]) in result["downloaded"]:
                    continue
                hasher = hashlib.sha256()
                _hash_file(final, hasher)
                if hasher.hexdigest() != str(entry["sha256"]).lower():
                    os.remove(final)
                    self._fail(f"{entry['path']}: the copy on this host does not match its sha256 (removed; run "
                               "again to download it)")
            result["download_bytes"] = fetched
            tmp_marker = os.path.join(self.rev_dir, MARKER + ".tmp")
            with open(tmp_marker, "w", encoding="utf-8") as handle:
                json.dump({"digest": digest, "revision": self.revision, "total_bytes": total}, handle)
            os.replace(tmp_marker, os.path.join(self.rev_dir, MARKER))
            self.report("done", force=True)
        if not in_place:
            os.makedirs(self.root, exist_ok=True)
            tmp_link = self.link + ".vllm-fleet-tmp"
            if os.path.lexists(tmp_link):
                os.remove(tmp_link)
            os.symlink(os.path.relpath(self.rev_dir, self.root), tmp_link)
            if os.path.isdir(self.link) and not os.path.islink(self.link):
                self._fail(f"{self.link} is a directory, not the stage's symlink: move it away (or stage under "
                           "another root)")
            os.replace(tmp_link, self.link)
        os.utime(self.rev_dir)
        result["pruned"] = self.prune(self.params["keep"])
        result["seconds"] = round(time.monotonic() - start, 3)
        result["changed"] = changed or bool(result["pruned"])
        self.module.exit_json(**result)

    def watch(self):
        """Wait for the next progress step of the async present run tagged run_id (or its end); one line back."""
        steps = max(int(self.params["steps"]), 1)
        step = min(max(int(self.params["step"]), 1), steps)
        deadline = time.monotonic() + max(int(self.params["watch_timeout"]), 0)
        run_id, job_file = self.params.get("run_id"), self.params.get("job_file")
        while True:
            ended = _job_ended(job_file)
            progress = _read_json(self.progress_path)
            if progress is not None and progress.get("run") != run_id:
                progress = None
            total = int(progress.get("total_bytes") or 0) if progress else 0
            finished = ended or (progress is not None and progress.get("state") in ("done", "failed"))
            done_bytes = int(progress.get("done_bytes") or 0) if progress else 0
            reached = (progress is not None and step < steps and done_bytes > int(self.params["after"])
                       and done_bytes * steps >= total * step)
            if finished or reached or time.monotonic() >= deadline:
                break
            time.sleep(WATCH_POLL_S)
        if progress is None:
            line = "nothing to download (the verified revision is in place)" if ended else "waiting for the transfer"
        else:
            line = progress_line(progress)
        self.module.exit_json(changed=False, done=bool(finished), progress=f"{self.name}@{self.revision}: {line}",
                              done_bytes=int(progress.get("done_bytes") or 0) if progress else 0, total_bytes=total)

    def probe(self, url):
        try:
            headers = dict(self.params["headers"] or {})
            with open_url(url, headers=headers, method="HEAD", timeout=self.params["timeout"]):
                return True, ""
        except urllib.error.HTTPError as exc:
            return False, f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, UrlConnectionError, SSLValidationError) as exc:
            return False, str(getattr(exc, "reason", exc))


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "name": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "files": {"type": "list", "elements": "dict", "default": []},
            "headers": {"type": "dict", "default": {}, "no_log": True},
            "keep": {"type": "int", "default": 2},
            "rate_bytes": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 60},
            "state": {"type": "str", "choices": ["present", "probe", "watch"], "default": "present"},
            "probe_url": {"type": "str"},
            "run_id": {"type": "str"},
            "job_file": {"type": "path"},
            "step": {"type": "int", "default": 1},
            "steps": {"type": "int", "default": 1},
            "after": {"type": "int", "default": -1},
            "watch_timeout": {"type": "int", "default": 86400},
        },
        supports_check_mode=True,
    )
    Stager(module).run()


if __name__ == "__main__":
    main()
