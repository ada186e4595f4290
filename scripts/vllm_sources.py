"""Fill ``.cache/vllm-src/<version>/vllm`` with the Python source of every verified vLLM release.

The golden tests (``tests/unit/planner/test_rules_golden.py``) check that each fact the planner takes from vLLM
still sits at the cited lines of that release's source. This script gets the sources the way
docs/vllm-versions.md describes: ``pip download`` of the release's manylinux wheel (pip reads the index from the
host's own configuration), then the ``vllm/**/*.py`` members only (no compiled extensions). A release already on
disk is left alone, so a second run costs nothing.

Usage: ``python scripts/vllm_sources.py [--dest .cache/vllm-src] [VERSION ...]`` (default: every key of
the release blocks, ``planner/releases/``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def verified_versions() -> list[str]:
    """The releases the planner cites: the release blocks (``planner/releases/``), imported without Ansible (the
    package is standard library only)."""
    sys.path.insert(0, str(ROOT / "collections"))
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.releases import RELEASES

    return [release.version for release in RELEASES]


def present(dest: Path, version: str) -> bool:
    version_file = dest / version / "vllm" / "_version.py"
    return version_file.is_file() and f"'{version}" in version_file.read_text(encoding="utf-8")


def fetch(dest: Path, version: str) -> int:
    """Download the wheel of ``version`` and extract its Python sources; returns the number of files."""
    with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64", f"vllm=={version}", "-d", tmp],
            check=True)
        wheels = sorted(Path(tmp).glob(f"vllm-{version}-*.whl"))
        if not wheels:
            raise SystemExit(f"pip downloaded no wheel of vllm {version}")
        target = dest / version
        count = 0
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name in wheel.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    wheel.extract(name, target)
                    count += 1
        return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="releases to fetch (default: every verified one)")
    parser.add_argument("--dest", type=Path, default=ROOT / ".cache" / "vllm-src")
    args = parser.parse_args(argv)
    for version in args.versions or verified_versions():
        if present(args.dest, version):
            print(f"vLLM {version}: source already in {args.dest / version}")
            continue
        started = time.monotonic()
        count = fetch(args.dest, version)
        if not present(args.dest, version):
            raise SystemExit(f"vLLM {version}: the wheel holds no vllm/_version.py of that release")
        print(f"vLLM {version}: {count} source files in {args.dest / version} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
