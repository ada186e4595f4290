"""Converge cost at fleet scale: a no-op run of ``playbooks/provision.yml`` next to a bare play, and the effect of
the Ansible settings (forks, pipelining, fact caching, strategy) on that no-op run.

It starts N container hosts (default 20, ``vf-bench-conv-NN``) from the debootstrap image the way
``molecule/provision_fleet`` does (host network, systemd as PID 1, the ``community.docker.docker`` connection,
that scenario's group_vars: CPU lane, no driver, no NVIDIA repository reached), waits for systemd with the
scenario's ``prepare.yml``, converges once (timed as "first converge"), then

1. runs the play once more, untimed, with the ``ansible.posix.json`` callback: every host must report
   ``changed=0``; it yields the tasks each host executed (split into those that ran a module on the host and
   those the controller answered alone: skipped, ``assert``, ``debug``, includes) and each task's wall time;
2. times, per repetition and back to back, the no-op run and the **bare play**: the same hosts, connection,
   ``become`` and number of tasks per host, where every task that ran a module on the host becomes one
   ``ansible.builtin.ping`` (the cheapest module round trip: copy/pipe AnsiballZ, start Python, answer) and
   every task the controller answered alone becomes one ``ansible.builtin.debug``. That is Ansible's own
   floor for this many tasks of these kinds: all-``debug`` would leave out the connection and understate the
   floor, all-``ping`` (or ``command: true``, a ping plus a fork) would charge a round trip to tasks that never
   leave the controller and overstate it. What the no-op run costs above the floor is the roles' own work:
   fact gathering (``setup`` vs one ping), ``template``'s stat + checksum + ``file`` (two round trips), ``apt``'s
   cache check, systemd queries;
3. times the no-op run under each setting, one change at a time from a reference (forks 10, pipelining off,
   implicit fact gathering without a cache, linear strategy), and under ``ansible.cfg`` as shipped.

Every timed variant runs ``--repeats`` times (default 2), interleaved; the medians are reported. A no-op run
that reports ``changed`` or ``failed`` on any host fails the benchmark. The containers are removed at the end,
also on failure or Ctrl-C. Nothing listens on a port.

    .venv/bin/python scripts/bench_converge.py [--hosts 20] [--repeats 2] [--json artifacts/bench/converge.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv" / "bin"
PLAYBOOK = ROOT / "playbooks" / "provision.yml"
SCENARIO = ROOT / "molecule" / "provision_fleet"
PREFIX = "vf-bench-conv-"
RECAP_RE = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)
# Actions the controller answers without running a module on the host.
CONTROLLER_ACTIONS = {"assert", "debug", "fail", "meta", "set_fact", "include_role", "include_tasks",
                      "import_role", "import_tasks", "include_vars", "add_host", "group_by"}
# One change at a time from the reference; "ansible.cfg" is the repository's configuration as shipped.
REFERENCE = {"ANSIBLE_FORKS": "10", "ANSIBLE_PIPELINING": "false", "ANSIBLE_GATHERING": "implicit",
             "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_STRATEGY": "linear"}
VARIANTS: list[tuple[str, dict[str, str]]] = [
    ("reference: forks 10, pipelining off, no fact cache, linear", {}),
    ("forks 5", {"ANSIBLE_FORKS": "5"}),
    ("forks 20", {"ANSIBLE_FORKS": "20"}),
    ("pipelining on", {"ANSIBLE_PIPELINING": "true"}),
    ("gathering smart + jsonfile fact cache", {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "jsonfile"}),
    ("strategy free", {"ANSIBLE_STRATEGY": "free"}),
]
CFG_VARIANT = "ansible.cfg as shipped"
SEED_IMAGE = "vllm-fleet/bench-conv-seed:latest"


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def names(n_hosts: int) -> list[str]:
    return [f"{PREFIX}{i:02d}" for i in range(1, n_hosts + 1)]


def remove_containers() -> None:
    """Remove every vf-bench-conv-* container (this benchmark's naming; nothing else uses it)."""
    found = sh(["docker", "ps", "-aq", "--filter", f"name=^{PREFIX}"]).stdout.split()
    if found:
        sh(["docker", "rm", "-f", "-v", *found])


def start_containers(image: str, hosts: list[str]) -> None:
    """Like molecule/provision_fleet's platforms: host network, systemd as PID 1, no --privileged."""
    for name in hosts:
        proc = sh(["docker", "run", "-d", "--name", name, "--network", "host", "--cap-add", "SYS_ADMIN",
                   "--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                   "--cgroupns", "host", image, "/lib/systemd/systemd"])
        if proc.returncode != 0:
            raise RuntimeError(f"docker run {name}: {proc.stderr.strip()}")


def write_inventory(work: Path, hosts: list[str], dirname: str = "inventory") -> Path:
    """The hosts with the community.docker.docker connection and provision_fleet's group_vars."""
    scenario = yaml.safe_load((SCENARIO / "molecule.yml").read_text())
    group_vars = scenario["provisioner"]["inventory"]["group_vars"]["all"]
    # molecule expands $VAR in its config; "$$" is its escape for a literal "$".
    group_vars = {k: v.replace("$$", "$") if isinstance(v, str) else v for k, v in group_vars.items()}
    inv = work / dirname
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    hosts_yml = {"all": {"hosts": {h: {"ansible_connection": "community.docker.docker"} for h in hosts}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts_yml))
    return inv


def playbook(inv: Path, play: Path, env: dict[str, str], timeout: int) -> tuple[float, str, int]:
    """Wall seconds, output, exit status of one ansible-playbook run."""
    start = time.monotonic()
    proc = sh([str(VENV / "ansible-playbook"), "-i", str(inv), str(play)], cwd=ROOT, env=env, timeout=timeout)
    return time.monotonic() - start, proc.stdout + proc.stderr, proc.returncode


def recap(output: str) -> dict[str, dict[str, int]]:
    return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
            for m in RECAP_RE.finditer(output)}


def check_noop(what: str, output: str, rc: int, hosts: list[str]) -> dict[str, dict[str, int]]:
    counts = recap(output)
    bad = {h: c for h, c in counts.items() if c["changed"] or c["failed"] or c["unreachable"]}
    if rc != 0 or sorted(counts) != sorted(hosts) or bad:
        raise RuntimeError(f"{what}: not a clean no-op run (rc {rc}; {bad or sorted(counts)})\n{output[-4000:]}")
    return counts


def analyse(inv: Path, env: dict[str, str], hosts: list[str], timeout: int) -> dict[str, Any]:
    """One untimed no-op run with the json callback: tasks per host by kind, and each task's wall time."""
    run_env = dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = sh([str(VENV / "ansible-playbook"), "-i", str(inv), str(PLAYBOOK)], cwd=ROOT, env=run_env,
              timeout=timeout)
    rc, output = proc.returncode, proc.stdout
    try:
        data = json.loads(output[output.find("{"):])
    except ValueError as exc:
        raise RuntimeError(f"analysis run: no JSON (rc {rc})\n{output[-3000:]}\n{proc.stderr[-3000:]}") from exc
    per_host: dict[str, dict[str, int]] = {h: {"remote": 0, "controller": 0} for h in hosts}
    tasks: list[dict[str, Any]] = []
    for play in data["plays"]:
        for entry in play["tasks"]:
            task = entry["task"]
            dur = task.get("duration", {})
            secs = _seconds(dur.get("end")) - _seconds(dur.get("start")) if dur.get("end") else 0.0
            tasks.append({"task": f"{play['play']['name']} | {task['name']}", "s": round(secs, 2)})
            for host, res in entry["hosts"].items():
                if res.get("changed") or res.get("failed") or res.get("unreachable"):
                    raise RuntimeError(f"analysis run: {host} {task['name']}: {res}")
                if host not in per_host:
                    continue
                action = str(res.get("action", "")).rsplit(".", 1)[-1]
                kind = "controller" if res.get("skipped") or action in CONTROLLER_ACTIONS else "remote"
                per_host[host][kind] += 1
    stats = data["stats"]
    if rc != 0 or any(stats[h]["changed"] or stats[h]["failures"] or stats[h]["unreachable"] for h in hosts):
        raise RuntimeError(f"analysis run: not a clean no-op run: {stats}")
    # Hosts differ only by the summary's run_once task: count the busiest host's.
    return {"per_host": {kind: max(c[kind] for c in per_host.values()) for kind in ("remote", "controller")},
            "recap_ok_plus_skipped": max(stats[h]["ok"] + stats[h]["skipped"] for h in hosts),
            "slowest_tasks": sorted(tasks, key=lambda t: -t["s"])[:12],
            "tasks_total_s": round(sum(t["s"] for t in tasks), 1)}


def _seconds(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    # ansible.posix.json: "2026-05-09T07:35:25.123456Z"
    return datetime.strptime(stamp.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def bare_play(remote: int, controller: int) -> str:
    tasks = [f"    - name: Bare | Module round trip {i:02d}\n      ansible.builtin.ping:\n" for i in range(remote)]
    tasks += [f"    - name: Bare | Controller only {i:02d}\n      ansible.builtin.debug:\n"
              f"        msg: \"{{{{ inventory_hostname }}}}\"\n      changed_when: false\n" for i in range(controller)]
    return ("---\n- name: Bare | same hosts, connection, become and task count (Ansible's own floor)\n"
            "  hosts: all\n  become: true\n  gather_facts: false\n  tasks:\n" + "".join(tasks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per variant (median reported)")
    parser.add_argument("--image", default=os.environ.get("VLLM_FLEET_BASE_IMAGE", "vllm-fleet/debian:bookworm"))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per ansible-playbook run")
    parser.add_argument("--json", type=Path, default=ROOT / "artifacts" / "bench" / "converge.json")
    parser.add_argument("--max-ratio", type=float, default=1.5, help="exit 1 when ansible.cfg's ratio is above")
    parser.add_argument("--seed", action="store_true",
                        help="converge one host from the base image and start the fleet from its snapshot "
                             "(first converge: minutes instead of 20 parallel docker.io installs)")
    parser.add_argument("--keep", action="store_true", help="leave the containers running at the end")
    parser.add_argument("--reuse", action="store_true", help="time on already converged vf-bench-conv-* hosts")
    parser.add_argument("--reuse-first-converge", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", default=None, help="variant names (prefix) to time; default all")
    args = parser.parse_args()
    if sh(["docker", "image", "inspect", args.image]).returncode != 0:
        sys.exit(f"base image {args.image} missing: run `make testbed` first")
    hosts = names(args.hosts)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="vf-bench-conv-"))
    base_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                    ANSIBLE_NOCOLOR="1", PATH=f"{VENV}:{os.environ['PATH']}",
                    ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
                    ANSIBLE_INJECT_FACT_VARS="false", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"),
                    ANSIBLE_LOCAL_TEMP=str(work / "tmp"))
    for key in [k for k in base_env if k.startswith("ANSIBLE_") and k not in
                {"ANSIBLE_CONFIG", "ANSIBLE_FORCE_COLOR", "ANSIBLE_NOCOLOR", "ANSIBLE_COLLECTIONS_PATH",
                 "ANSIBLE_ROLES_PATH", "ANSIBLE_INJECT_FACT_VARS", "ANSIBLE_CACHE_PLUGIN_CONNECTION",
                 "ANSIBLE_LOCAL_TEMP"}]:
        del base_env[key]  # the caller's ANSIBLE_* would skew the variants
    ref_env = dict(base_env, **REFERENCE)
    result: dict[str, Any] = {"hosts": args.hosts, "repeats": args.repeats, "cpus": os.cpu_count(),
                              "image": args.image,
                              "ansible_core": sh([str(VENV / "ansible"), "--version"]).stdout.split("\n")[0]}
    try:
        running = sh(["docker", "ps", "-q", "--filter", f"name=^{PREFIX}"]).stdout.split()
        if args.reuse and len(running) == len(hosts):
            inv = write_inventory(work, hosts)
            result["first_converge_s"] = args.reuse_first_converge
            print(f"reusing {len(hosts)} converged hosts", flush=True)
        else:
            remove_containers()
            image = args.image
            if args.seed:
                # One host converged from the base image, committed, and the fleet started from it: the
                # fleet's own "first converge" is then the converge of already provisioned hosts.
                seed = f"{PREFIX}seed"
                start_containers(args.image, [seed])
                seed_inv = write_inventory(work, [seed], "seed")
                for play in (SCENARIO / "prepare.yml", PLAYBOOK):
                    secs, out, rc = playbook(seed_inv, play, ref_env, args.timeout)
                    if rc != 0:
                        raise RuntimeError(f"seed {play.name} failed\n{out[-4000:]}")
                result["seed_first_converge_s"] = round(secs, 1)
                print(f"seed host converged from the base image in {secs:.1f} s", flush=True)
                image = SEED_IMAGE
                if sh(["docker", "commit", seed, image]).returncode != 0:
                    raise RuntimeError("docker commit failed")
                sh(["docker", "rm", "-f", "-v", seed])
                result["image"] = f"{args.image} converged once ({image})"
            t0 = time.monotonic()
            start_containers(image, hosts)
            inv = write_inventory(work, hosts)
            for _attempt in range(3):  # a host still booting can refuse the first connection
                _secs, out, rc = playbook(inv, SCENARIO / "prepare.yml", ref_env, args.timeout)
                if rc == 0:
                    break
                time.sleep(5)
            if rc != 0:
                raise RuntimeError(f"prepare failed\n{out[-4000:]}")
            print(f"{args.hosts} hosts started and booted in {time.monotonic() - t0:.0f} s", flush=True)
            first_s, out, rc = playbook(inv, PLAYBOOK, ref_env, args.timeout)
            if rc != 0:
                raise RuntimeError(f"first converge failed\n{out[-6000:]}")
            result["first_converge_s"] = round(first_s, 1)
            print(f"first converge: {first_s:.1f} s", flush=True)

        info = analyse(inv, ref_env, hosts, args.timeout)
        result["tasks_per_host"] = {**info["per_host"], "recap_ok_plus_skipped": info["recap_ok_plus_skipped"]}
        result["slowest_tasks"] = info["slowest_tasks"]
        bare = work / "bare.yml"
        bare.write_text(bare_play(info["per_host"]["remote"], info["per_host"]["controller"]))
        print(f"tasks per host: {info['per_host']['remote']} on the host + {info['per_host']['controller']} on "
              f"the controller (recap ok+skipped {info['recap_ok_plus_skipped']})", flush=True)

        variants = [(name, dict(ref_env, **env)) for name, env in VARIANTS]
        variants.insert(1, (CFG_VARIANT, dict(base_env)))  # the two ratio pairs first
        if args.only:
            variants = [v for v in variants if any(v[0].startswith(p) for p in args.only)]
        # The fact cache variant times warm-cache runs: fill the cache first (untimed).
        for name, env in variants:
            if env.get("ANSIBLE_GATHERING") == "smart" or (name == CFG_VARIANT and _cfg_caches()):
                check_noop(f"{name} (cache fill)", *playbook(inv, PLAYBOOK, env, args.timeout)[1:], hosts)
        times: dict[str, list[float]] = {name: [] for name, _env in variants}
        bare_times: dict[str, list[float]] = {}
        for rep in range(args.repeats):
            for name, env in variants:
                secs, out, rc = playbook(inv, PLAYBOOK, env, args.timeout)
                check_noop(name, out, rc, hosts)
                times[name].append(secs)
                line = f"[{rep + 1}/{args.repeats}] {name}: no-op {secs:.1f} s"
                if name == CFG_VARIANT or name.startswith("reference"):
                    bsecs, bout, brc = playbook(inv, bare, env, args.timeout)
                    if brc != 0:
                        raise RuntimeError(f"bare play failed\n{bout[-3000:]}")
                    bare_times.setdefault(name, []).append(bsecs)
                    line += f", bare play {bsecs:.1f} s, ratio {secs / bsecs:.2f}"
                print(line, flush=True)
                progress = dict(result, noop_runs_s=times, bare_runs_s=bare_times)
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(progress, indent=2) + "\n")  # partial figures survive a failure
        ref_name = VARIANTS[0][0]
        ref_med = statistics.median(times[ref_name]) if ref_name in times else None
        rows = []
        for name, _env in variants:
            med = statistics.median(times[name])
            row: dict[str, Any] = {"variant": name, "noop_s": round(med, 1), "runs_s": [round(t, 1) for t in times[name]]}
            if ref_med:
                row["vs_reference"] = f"{(med / ref_med - 1) * 100:+.0f} %"
            if name in bare_times:
                bmed = statistics.median(bare_times[name])
                ratios = [t / b for t, b in zip(times[name], bare_times[name], strict=True)]
                row.update(bare_s=round(bmed, 1), bare_runs_s=[round(b, 1) for b in bare_times[name]],
                           ratio=round(statistics.median(ratios), 2))
            rows.append(row)
        result["variants"] = rows
    finally:
        if not args.keep:
            remove_containers()
            sh(["docker", "image", "rm", SEED_IMAGE])
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.hosts} hosts, {result['tasks_per_host']['remote']} + {result['tasks_per_host']['controller']} tasks "
          f"per host, median of {args.repeats}; first converge {result['first_converge_s']} s")
    print(f"{'variant':<58} {'no-op s':>8} {'vs ref':>7} {'bare s':>7} {'ratio':>6}")
    for row in result["variants"]:
        print(f"{row['variant']:<58} {row['noop_s']:>8} {row.get('vs_reference', ''):>7} "
              f"{row.get('bare_s', ''):>7} {row.get('ratio', ''):>6}")
    print("\nslowest tasks of the no-op run (reference settings, wall time over all hosts):")
    for task in result["slowest_tasks"]:
        print(f"  {task['s']:>6.2f} s  {task['task']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    shipped = next((r for r in result["variants"] if r["variant"] == CFG_VARIANT and "ratio" in r), None)
    if shipped is None:
        return 0
    met = shipped["ratio"] <= args.max_ratio
    print(f"\nno-op run / bare play with ansible.cfg as shipped: {shipped['ratio']} "
          f"({'within' if met else 'ABOVE'} the target {args.max_ratio})")
    return 0 if met else 1


def _cfg_caches() -> bool:
    """Whether ansible.cfg as shipped enables a persistent fact cache (then its runs are timed warm)."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    return cfg.get("defaults", "fact_caching", fallback="memory") != "memory"


if __name__ == "__main__":
    raise SystemExit(main())
