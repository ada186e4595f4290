"""Converge cost at fleet scale: a no-op run of ``playbooks/provision.yml`` next to a bare play, and the effect of
the Ansible settings (forks, pipelining, fact caching, strategy) on that no-op run.

It starts N container hosts (default 20, ``vf-bench-conv-NN``) from the debootstrap image the way
``molecule/provision_fleet`` does (systemd as PID 1, the ``community.docker.docker`` connection, that scenario's
group_vars: CPU lane, no driver), but with **no network** (``--network none``): apt in the containers works from
this machine's own package lists and .deb cache (``offline_apt``), the NVIDIA repository is off
(``container_runtime_nvidia_repo_enabled: false``) and apt's update stamp is kept fresh, so nothing is fetched
from anywhere. With ``--seed`` (what ``make bench-converge`` uses) one host is converged from the base image,
committed, and the fleet starts from that snapshot. The scenario's ``prepare.yml`` waits for systemd, the fleet
converges once (pipelining on, to save time; timed as "first converge"), then, per repetition:

1. the no-op run under each setting, one change at a time from the reference (``ansible.cfg`` as shipped: forks 10,
   pipelining on, implicit fact gathering, in-memory fact cache, linear strategy); every run must report
   ``changed=0`` on every host;
2. next to the reference and to "pipelining off", the **bare play**: the same hosts, connection, ``become`` and
   number of tasks per host, where every task that ran a module on the host becomes one
   ``ansible.builtin.ping`` (the cheapest module round trip) and every task the controller answered alone
   (skipped, ``assert``, ``debug``, includes, ``validate_argument_spec``, ``meta``) becomes one
   ``ansible.builtin.debug``. That is Ansible's own floor for this many tasks of these kinds. What the no-op
   run costs above it is the roles' own work: fact gathering (``setup`` vs one ping), ``template``'s stat +
   ``file`` (two round trips), ``apt``'s cache check, systemd queries.

Every run (bare plays too) uses the ``ansible.posix.json`` stdout callback; the first no-op run's output gives
the task counts and each task's wall time. Every timed variant runs ``--repeats`` times, interleaved; medians
are reported. The containers are removed at the end, also on failure or Ctrl-C. Nothing listens on a port.

On 2 shared cores a no-op run of 20 hosts takes about 4 minutes (8 with pipelining off), so the whole variant set is
about 40 minutes per repetition; ``--only`` times the reference plus the named variants (none: the reference and
its bare play only).

    .venv/bin/python scripts/bench_converge.py --seed [--hosts 20] [--repeats 1] [--only pipelining forks]
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
# Actions the controller answers without running a module on the host.
CONTROLLER_ACTIONS = {"assert", "debug", "fail", "meta", "set_fact", "include_role", "include_tasks",
                      "import_role", "import_tasks", "include_vars", "add_host", "group_by",
                      "validate_argument_spec"}
# The reference is ansible.cfg as shipped: forks 10, pipelining on (`[connection] pipelining`, which the
# community.docker.docker connection reads), implicit fact gathering, in-memory fact cache, linear strategy. Each
# variant changes one thing; "pipelining off" is ansible.cfg before it set `[connection] pipelining`.
VARIANTS: list[tuple[str, dict[str, str]]] = [
    ("as shipped: forks 10, pipelining on, no fact cache, linear", {}),
    ("pipelining off", {"ANSIBLE_PIPELINING": "false"}),
    ("forks 20", {"ANSIBLE_FORKS": "20"}),
    ("forks 5", {"ANSIBLE_FORKS": "5"}),
    ("strategy free", {"ANSIBLE_STRATEGY": "free"}),
    ("gathering smart + jsonfile fact cache (warm)", {"ANSIBLE_GATHERING": "smart", "ANSIBLE_CACHE_PLUGIN": "jsonfile"}),
]
# Variants timed next to the bare play under the same settings (the ratio pairs).
RATIO_VARIANTS = {VARIANTS[0][0], "pipelining off"}
SEED_IMAGE = "vllm-fleet/bench-conv-seed:latest"
# Offline hosts: no NVIDIA repository (its task needs python3-debian, which is not in this machine's apt cache,
# and an apt source that can never be fetched); the CPU lane has no use for it. Everything else as the scenario.
BENCH_VARS = {"container_runtime_nvidia_repo_enabled": False}
HOST_APT_ARCHIVES = Path("/var/cache/apt/archives")
HOST_APT_LISTS = Path("/var/lib/apt/lists")
# apt in the containers: the host's (compressed) package lists, and no Recommends (git, needrestart, ... are not
# in the host's cache; docker.io runs without them).
APT_CONF = 'Acquire::GzipIndexes "true";\nAPT::Install-Recommends "false";\n'
APT_STAMP = "/var/lib/apt/periodic/update-success-stamp"


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
    """Like molecule/provision_fleet's platforms (systemd as PID 1, no --privileged), but with no network at
    all: the community.docker.docker connection is `docker exec`, and nothing the benchmark runs may reach
    an outside address (packages come from this machine's apt cache, see offline_apt)."""
    for name in hosts:
        proc = sh(["docker", "run", "-d", "--name", name, "--network", "none", "--cap-add", "SYS_ADMIN",
                   "--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                   "--cgroupns", "host", image, "/lib/systemd/systemd"])
        if proc.returncode != 0:
            raise RuntimeError(f"docker run {name}: {proc.stderr.strip()}")


def offline_apt(hosts: list[str], packages: list[str], work: Path) -> None:
    """Make `apt install PACKAGES` work in network-less containers from this machine's own apt state.

    The host's package lists replace the containers' (same Debian mirror in their sources), the .deb files
    apt would download are copied from the host's /var/cache/apt/archives, and a package missing there but
    installed on the host in the very version apt wants is rebuilt from the host's installed files and
    installed with dpkg first (netbase: four files in /etc). Then apt's update stamp is set to now, so that
    ``update_cache: true, cache_valid_time: 3600`` does not refresh (a refresh would need the mirror).
    """
    stage = work / "apt"
    (stage / "lists").mkdir(parents=True, exist_ok=True)
    for f in HOST_APT_LISTS.iterdir():
        if f.is_file() and f.name not in {"lock"}:
            shutil.copy2(f, stage / "lists" / f.name)
    (stage / "99vf-bench-offline").write_text(APT_CONF)
    for host in hosts:
        for cmd in (["docker", "exec", host, "sh", "-c", "rm -f /var/lib/apt/lists/*_Packages* /var/lib/apt/lists/*Release*"],
                    ["docker", "cp", f"{stage / 'lists'}/.", f"{host}:/var/lib/apt/lists/"],
                    ["docker", "cp", str(stage / "99vf-bench-offline"), f"{host}:/etc/apt/apt.conf.d/99vf-bench-offline"]):
            proc = sh(cmd)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
        uris = sh(["docker", "exec", host, "apt-get", "install", "--print-uris", "-qq", *packages])
        if uris.returncode != 0:
            raise RuntimeError(f"{host}: apt-get --print-uris: {uris.stderr.strip()}")
        wanted = [line.split()[1] for line in uris.stdout.splitlines() if line.startswith("'")]
        repacked: list[str] = []
        for deb in wanted:
            src = HOST_APT_ARCHIVES / deb
            if not src.exists():
                src = _repack_installed(deb, stage)
                repacked.append(f"/var/cache/apt/archives/{deb}")
            proc = sh(["docker", "cp", str(src), f"{host}:/var/cache/apt/archives/{deb}"])
            if proc.returncode != 0:
                raise RuntimeError(f"docker cp {deb}: {proc.stderr.strip()}")
        if repacked:  # not apt's: its checksum differs from the lists', so dpkg installs it
            proc = sh(["docker", "exec", "-e", "DEBIAN_FRONTEND=noninteractive", host, "dpkg", "-i", *repacked])
            if proc.returncode != 0:
                raise RuntimeError(f"{host}: dpkg -i {repacked}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            sh(["docker", "exec", host, "rm", "-f", *repacked])
        touch_apt_stamp([host])


def touch_apt_stamp(hosts: list[str]) -> None:
    for host in hosts:
        sh(["docker", "exec", host, "sh", "-c", f"mkdir -p {Path(APT_STAMP).parent} && touch {APT_STAMP}"])


def _repack_installed(deb: str, stage: Path) -> Path:
    """Rebuild NAME_VERSION_ARCH.deb from the host's installed files when the host has that exact version."""
    name, version = deb.split("_")[0], deb.split("_")[1].replace("%3a", ":")
    status = sh(["dpkg-query", "-s", name])
    fields = dict(re.findall(r"^(\S+): (.*)$", status.stdout, re.MULTILINE))
    if status.returncode != 0 or fields.get("Version") != version or "installed" not in fields.get("Status", ""):
        raise RuntimeError(f"{deb} is neither in {HOST_APT_ARCHIVES} nor installed here: cannot install it offline")
    root = stage / f"repack-{name}"
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    control = re.sub(r"^(Status|Conffiles|Installed-Size): .*\n(^ .*\n)*", "", status.stdout, flags=re.MULTILINE)
    (root / "DEBIAN" / "control").write_text(control.rstrip("\n") + "\n")
    conffiles = re.findall(r"^ (/\S+) [0-9a-f]{32}$", status.stdout, re.MULTILINE)
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(f"{c}\n" for c in conffiles))
    for script in ("preinst", "postinst", "prerm", "postrm"):
        info = Path(f"/var/lib/dpkg/info/{name}.{script}")
        if info.exists():
            shutil.copy2(info, root / "DEBIAN" / script)
    for path in sh(["dpkg-query", "-L", name]).stdout.splitlines():
        src = Path(path)
        if src.is_file() and not src.is_symlink():
            dst = root / path.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    out = stage / deb
    proc = sh(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)])
    if proc.returncode != 0:
        raise RuntimeError(f"dpkg-deb {deb}: {proc.stderr.strip()}")
    return out


def write_inventory(work: Path, hosts: list[str], dirname: str = "inventory") -> Path:
    """The hosts with the community.docker.docker connection and provision_fleet's group_vars."""
    scenario = yaml.safe_load((SCENARIO / "molecule.yml").read_text())
    group_vars = scenario["provisioner"]["inventory"]["group_vars"]["all"]
    # molecule expands $VAR in its config; "$$" is its escape for a literal "$".
    group_vars = {k: v.replace("$$", "$") if isinstance(v, str) else v for k, v in group_vars.items()}
    group_vars.update(BENCH_VARS)
    inv = work / dirname
    (inv / "group_vars").mkdir(parents=True)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    hosts_yml = {"all": {"hosts": {h: {"ansible_connection": "community.docker.docker"} for h in hosts}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts_yml))
    return inv


def playbook(inv: Path, play: Path, env: dict[str, str], timeout: int) -> tuple[float, str, int]:
    """Wall seconds, output, exit status of one ansible-playbook run (its forks are stopped with it)."""
    start = time.monotonic()
    with subprocess.Popen([str(VENV / "ansible-playbook"), "-i", str(inv), str(play)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return time.monotonic() - start, out + err, proc.returncode


def playbook_json(inv: Path, play: Path, env: dict[str, str], timeout: int) -> tuple[float, dict[str, Any]]:
    """One timed run with the ansible.posix.json stdout callback (every timed run uses it, bare plays included)."""
    secs, output, rc = playbook(inv, play, dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"), timeout)
    try:
        data = json.loads(output[output.find("{"):output.rfind("}") + 1])
    except ValueError as exc:
        raise RuntimeError(f"{play.name}: no JSON (rc {rc})\n{output[-3000:]}") from exc
    if rc != 0:
        raise RuntimeError(f"{play.name}: rc {rc}: {json.dumps(data.get('stats'))}\n{output[-3000:]}")
    return secs, data


def check_noop_json(what: str, data: dict[str, Any], hosts: list[str]) -> None:
    stats = data["stats"]
    bad = {h: c for h, c in stats.items() if c["changed"] or c["failures"] or c["unreachable"]}
    if sorted(stats) != sorted(hosts) or bad:
        changed = [f"{e['task']['name']} @ {h}" for play in data["plays"] for e in play["tasks"]
                   for h, r in e["hosts"].items() if r.get("changed") or r.get("failed")]
        raise RuntimeError(f"{what}: not a clean no-op run: {bad or sorted(stats)}; {changed[:10]}")


def analyse(data: dict[str, Any], hosts: list[str]) -> dict[str, Any]:
    """Tasks per host by kind, and each task's wall time, from a no-op run's json callback output."""
    per_host: dict[str, dict[str, int]] = {h: {"remote": 0, "controller": 0} for h in hosts}
    tasks: list[dict[str, Any]] = []
    for play in data["plays"]:
        for entry in play["tasks"]:
            task = entry["task"]
            dur = task.get("duration", {})
            secs = _seconds(dur.get("end")) - _seconds(dur.get("start")) if dur.get("end") else 0.0
            kinds: dict[str, int] = {"remote": 0, "controller": 0}
            for host, res in entry["hosts"].items():
                if host not in per_host:
                    continue
                action = str(res.get("action", "")).rsplit(".", 1)[-1]
                kind = "controller" if res.get("skipped") or action in CONTROLLER_ACTIONS else "remote"
                per_host[host][kind] += 1
                kinds[kind] += 1
            tasks.append({"task": f"{play['play']['name']} | {task['name']}", "s": round(secs, 2),
                          "action": next((str(r.get("action", "")) for r in entry["hosts"].values()), ""),
                          "hosts_remote": kinds["remote"], "hosts_controller": kinds["controller"]})
    stats = data["stats"]
    # Hosts differ only by the summary's run_once task: count the busiest host's.
    return {"per_host": {kind: max(c[kind] for c in per_host.values()) for kind in ("remote", "controller")},
            "recap_ok_plus_skipped": max(stats[h]["ok"] + stats[h]["skipped"] for h in hosts),
            "tasks": tasks}


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
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per variant (median reported)")
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
    ref_env = base_env
    result: dict[str, Any] = {"hosts": args.hosts, "repeats": args.repeats, "cpus": os.cpu_count(),
                              "image": args.image,
                              "ansible_core": sh([str(VENV / "ansible"), "--version"]).stdout.split("\n")[0]}
    try:
        running = sh(["docker", "ps", "-q", "--filter", f"name=^{PREFIX}"]).stdout.split()
        if args.reuse and len(running) == len(hosts):
            touch_apt_stamp(hosts)
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
                offline_apt([seed], ["docker.io"], work)
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
            if args.seed:
                touch_apt_stamp(hosts)
            else:
                offline_apt(hosts, ["docker.io"], work)
            inv = write_inventory(work, hosts)
            for _attempt in range(3):  # a host still booting can refuse the first connection
                _secs, out, rc = playbook(inv, SCENARIO / "prepare.yml", ref_env, args.timeout)
                if rc == 0:
                    break
                time.sleep(5)
            if rc != 0:
                raise RuntimeError(f"prepare failed\n{out[-4000:]}")
            print(f"{args.hosts} hosts started and booted in {time.monotonic() - t0:.0f} s", flush=True)
            first_s, out, rc = playbook(inv, PLAYBOOK, dict(ref_env, ANSIBLE_PIPELINING="true"), args.timeout)
            if rc != 0:
                raise RuntimeError(f"first converge failed\n{out[-6000:]}")
            result["first_converge_s"] = round(first_s, 1)
            print(f"first converge (pipelining on): {first_s:.1f} s", flush=True)

        variants = [(name, dict(base_env, **env)) for name, env in VARIANTS]
        if args.only is not None:  # `--only` alone: the reference only
            variants = [v for v in variants if v[0] == VARIANTS[0][0] or any(v[0].startswith(p) for p in args.only)]
        bare = work / "bare.yml"
        info: dict[str, Any] | None = None
        times: dict[str, list[float]] = {name: [] for name, _env in variants}
        bare_times: dict[str, list[float]] = {}

        def save() -> None:  # partial figures survive a failure
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(dict(result, noop_runs_s=times, bare_runs_s=bare_times), indent=2) + "\n")

        for rep in range(args.repeats):
            for name, env in variants:
                if env.get("ANSIBLE_GATHERING") == "smart":
                    # Warm cache: facts gathered once into the jsonfile cache (untimed, one setup per host).
                    fill = sh([str(VENV / "ansible"), "-i", str(inv), "all", "-m", "ansible.builtin.setup"],
                              cwd=ROOT, env=env, timeout=args.timeout)
                    if fill.returncode != 0:
                        raise RuntimeError(f"fact cache fill failed\n{fill.stdout[-3000:]}{fill.stderr[-2000:]}")
                secs, data = playbook_json(inv, PLAYBOOK, env, args.timeout)
                check_noop_json(name, data, hosts)
                times[name].append(secs)
                if info is None:  # the first no-op run: how many tasks of each kind the bare play needs
                    info = analyse(data, hosts)
                    result["tasks_per_host"] = {**info["per_host"],
                                                "recap_ok_plus_skipped": info["recap_ok_plus_skipped"]}
                    result["tasks"] = info["tasks"]
                    bare.write_text(bare_play(info["per_host"]["remote"], info["per_host"]["controller"]))
                    print(f"tasks per host: {info['per_host']['remote']} on the host + "
                          f"{info['per_host']['controller']} on the controller "
                          f"(recap ok+skipped {info['recap_ok_plus_skipped']})", flush=True)
                line = f"[{rep + 1}/{args.repeats}] {name}: no-op {secs:.1f} s"
                if name in RATIO_VARIANTS:
                    bsecs, bdata = playbook_json(inv, bare, env, args.timeout)
                    if any(c["failures"] or c["unreachable"] for c in bdata["stats"].values()):
                        raise RuntimeError(f"bare play failed: {bdata['stats']}")
                    bare_times.setdefault(name, []).append(bsecs)
                    line += f", bare play {bsecs:.1f} s, ratio {secs / bsecs:.2f}"
                print(line, flush=True)
                save()
        ref_name = VARIANTS[0][0]
        ref_med = statistics.median(times[ref_name])
        rows = []
        for name, _env in variants:
            med = statistics.median(times[name])
            row: dict[str, Any] = {"variant": name, "noop_s": round(med, 1), "runs_s": [round(t, 1) for t in times[name]],
                                   "vs_reference": f"{(med / ref_med - 1) * 100:+.0f} %"}
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
    print("\nslowest tasks of the first no-op run (reference settings, wall time over all hosts):")
    for task in sorted(result["tasks"], key=lambda t: -t["s"])[:12]:
        print(f"  {task['s']:>6.2f} s  {task['task']} ({task['action']})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    shipped = result["variants"][0]
    met = shipped["ratio"] <= args.max_ratio
    print(f"\nno-op run / bare play with ansible.cfg as shipped: {shipped['ratio']} "
          f"({'within' if met else 'ABOVE'} the target {args.max_ratio})")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
