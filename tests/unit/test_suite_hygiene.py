"""The integration suite's own guards (tests/integration/conftest.py): an unmarked test or a shrunken selection
fails the run instead of being deselected silently; pytest runs with --strict-markers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _collect(tmp_path: Path, body: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Collect a throwaway integration folder that uses the real conftest's hooks (copied beside it)."""
    folder = tmp_path / "integration"
    folder.mkdir()
    hooks = (ROOT / "tests" / "integration" / "conftest.py").read_text().split("# ---- Suite hygiene", 1)[1]
    (folder / "conftest.py").write_text("import os\nfrom pathlib import Path\n\nimport pytest\n\n# ---- Suite hygiene"
                                        + hooks)
    (folder / "test_sample.py").write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", str(ROOT / "pyproject.toml"), str(folder), *args],
                          capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


def test_an_unmarked_integration_test_fails_collection(tmp_path: Path) -> None:
    done = _collect(tmp_path, """
        import pytest

        @pytest.mark.integration
        def test_marked():
            pass

        def test_forgotten():
            pass
    """, "-m", "integration")
    assert done.returncode != 0
    assert "must carry @pytest.mark.integration" in done.stdout + done.stderr
    assert "test_forgotten" in done.stdout + done.stderr


def test_the_floor_and_strict_markers(tmp_path: Path) -> None:
    body = """
        import pytest

        pytestmark = pytest.mark.integration

        def test_one():
            pass
    """
    assert _collect(tmp_path, body, env={"VLLM_FLEET_MIN_TESTS": "1"}).returncode == 0
    (tmp_path / "integration").rename(tmp_path / "first")
    low = _collect(tmp_path, body, env={"VLLM_FLEET_MIN_TESTS": "2"})
    assert low.returncode != 0 and "fewer than the floor of 2" in low.stdout + low.stderr
    (tmp_path / "integration").rename(tmp_path / "second")
    typo = _collect(tmp_path, body.replace("mark.integration", "mark.integraton"))
    assert typo.returncode != 0 and "integraton" in typo.stdout + typo.stderr
