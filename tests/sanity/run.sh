#!/usr/bin/env bash
# ansible-test sanity on this collection, offline (docs: the shared environment note's verified recipe).
#   bash tests/sanity/run.sh [ansible-test sanity options...]      (`make lint` runs it)
# ansible-test needs the collection at .../ansible_collections/vllm_fleet/fleet/ as a real tree, so the
# working tree (less what .gitignore ignores) is copied to a temporary .../ansible_collections/vllm_fleet/fleet
# outside the repository (inside it, ansible-test would list files with git and see only committed ones).
# Offline, two things would fail: ansible-test downloads a pip bootstrap script (a stand-in using ensurepip
# goes into its cache), and its per-test virtualenvs do not see the host's CA bundle (PIP_CERT).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=$(cd "${VENV:-$ROOT/.venv}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vllm-fleet-sanity.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
COPY=$WORK/ansible_collections/vllm_fleet/fleet
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

mkdir -p "$COPY"
# The files git shows (tracked and untracked, less what .gitignore ignores), listed once. make test runs the other
# lanes beside this one and they write under the repository: tar walking the tree itself stopped a CI run with
# "file changed as we read it". A listed file deleted meanwhile is skipped.
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - \
  | tar -C "$COPY" -xf -

# The pip version ansible-test bootstraps its virtualenvs with (get_venv_packages: pip='24.2').
pip_version=$("$VENV/bin/python" - <<'PY'
import pathlib, re, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip='([0-9.]+)'", src.read_text()).group(1))
PY
)
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
# Written unless a real download is there; ansible-test runs it with a clean environment, so the CA path is
# written into it.
if [[ ! -s $cache ]] || grep -q '^# Stand-in' "$cache"; then
  mkdir -p "$(dirname "$cache")"
  cat >"$cache" <<PY
# Stand-in for ansible-test's downloaded get-pip script (tests/sanity/run.sh): bundled pip, then the packages.
import ensurepip, os, subprocess, sys
ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
cert = ["--cert", "$CA_BUNDLE"] if os.path.exists("$CA_BUNDLE") else []
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *cert, *args])
PY
fi
[[ -f $CA_BUNDLE ]] && export PIP_CERT=$CA_BUNDLE

cd "$COPY"
env PATH="$VENV/bin:$PATH" ANSIBLE_CONFIG= "$VENV/bin/ansible-test" sanity --python 3.11 --color no "$@"
