"""The seams the architecture rests on, checked by import-linter (contracts in pyproject.toml): the
collector's core imports neither Django, torch, a framework nor the server, nor an adapter of
collector.integrations; the trainer reports only through the collector; the attribution engine
imports no Django; the query layer imports no page, API or e-mail code; no feature's pages
import another's, and the pieces they share (ettweb.pages) import none of them; the statistics
import no Django, nor do the importers' translators (ettweb.importers); the platform
(ettweb.platform) imports no app. Indirect imports count: a seam broken two modules away fails
too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_every_import_contract_is_kept() -> None:
    proc = subprocess.run([str(LINT_IMPORTS)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "ettweb.settings.test"},
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout
    assert proc.stdout.count(" KEPT") == 11
    for contract in ("Pages flow one way: no feature imports another's pages",
                     "The statistics import no Django", "The platform stands below every app",
                     "The importers' translators import no Django"):
        assert contract in proc.stdout


def test_a_contract_breaks_on_a_forbidden_import(tmp_path: Path) -> None:
    """The checker is not vacuous: a copy of the collector that imports Django breaks it."""
    copy = tmp_path / "collector"
    copy.mkdir()
    for source in (ROOT / "collector").glob("*.py"):
        (copy / source.name).write_text(source.read_text())
    (copy / "spool.py").write_text((copy / "spool.py").read_text() + "\nimport django\n")
    config = tmp_path / ".importlinter"
    config.write_text("[importlinter]\nroot_package = collector\ninclude_external_packages = "
                      "True\n\n[importlinter:contract:core]\nname = core\ntype = forbidden\n"
                      "source_modules = collector\nforbidden_modules = django\n")
    proc = subprocess.run([str(LINT_IMPORTS), str(config)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "collector.spool -> django" in proc.stdout


def core_modules_importing_an_adapter(package: str = "collector") -> set[str]:
    """Modules of the collector outside its integrations that reach one, directly or not."""
    graph = grimp.build_graph(package)
    adapters = f"{package}.integrations"
    if adapters not in graph.modules:
        return set()
    importers = graph.find_downstream_modules(adapters, as_package=True)
    return {m for m in importers if m != adapters and not m.startswith(adapters + ".")}


def test_the_collectors_core_never_imports_an_adapter() -> None:
    assert core_modules_importing_an_adapter() == set()


def test_the_adapter_check_sees_a_core_module_that_imports_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    package = tmp_path / "corepkg"
    (package / "integrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "integrations" / "__init__.py").write_text("")
    (package / "integrations" / "framework.py").write_text("import corepkg.core\n")
    (package / "spool.py").write_text("")
    (package / "core.py").write_text("import corepkg.spool\n")
    (package / "agent.py").write_text("from corepkg.integrations import framework\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert core_modules_importing_an_adapter("corepkg") == {"corepkg.agent"}
