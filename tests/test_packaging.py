"""The production image installs the project as a wheel (`pip install .` in the Dockerfile),
so a template or static file missing from the wheel is a 500 in production that no test on a
checkout would see. Build the wheel and compare."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_wheel_ships_every_template_and_static_file(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: setuptools builds in the source tree (build/)
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("ettweb", "collector", "trainer", "bench"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("ett-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(path.relative_to(ROOT)) for kind in ("templates", "static")
              for path in (ROOT / "ettweb").glob(f"**/{kind}/**/*") if path.is_file()}
    assert any(name.startswith("ettweb/reports/templates/reports/email/") for name in wanted)
    assert wanted - shipped == set()
