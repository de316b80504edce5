"""The installed layout: ``calving`` (ingest/api/), ``calving.commit`` (commit/) and
``calving.ingest`` (ingest/) from the package-dir mapping in pyproject.toml."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import calving

REPO = Path(__file__).resolve().parents[1]


def _load_build_pyfiles():  # deploy/ is scripts, not a package
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_pyfiles", REPO / "deploy/build_pyfiles.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package_sources = _load_build_pyfiles().package_sources
SOURCE_DIRS = ("commit", "ingest", "tests", "deploy")


def test_every_source_package_is_installed() -> None:
    """A folder with an ``__init__.py`` under commit/ or ingest/ that pyproject does not
    list would be missing from the wheel and the deploy zip, yet importable here."""
    listed = {folder.resolve() for folder in package_sources(REPO).values()}
    on_disk = {
        init.parent.resolve()
        for top in ("commit", "ingest")
        for init in (REPO / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert on_disk == listed


def test_no_module_imports_the_bare_top_level_names() -> None:
    """``import commit`` / ``from ingest ...`` would pick up whatever the working
    directory holds under those names; every import goes through ``calving.``."""
    offenders = []
    for top in SOURCE_DIRS:
        for path in (REPO / top).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                bad = [n for n in names if n.split(".")[0] in ("commit", "ingest")]
                offenders += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in bad]
    assert offenders == []


def test_version_is_the_packages_version() -> None:
    from importlib.metadata import version

    assert calving.__version__ == version("calving")


@pytest.mark.integration  # starts a process (tests/support/tiers.py)
def test_cli_runs_from_a_directory_holding_commit_and_ingest_modules(tmp_path: Path) -> None:
    """A user's ``commit.py`` or ``ingest/`` in the working directory used to shadow
    calving's packages and break the CLI."""
    for name in ("commit.py", "ingest.py", "deploy.py"):
        (tmp_path / name).write_text("raise SystemExit('shadowed: wrong module imported')\n")
    cli = Path(sys.executable).with_name("calving")
    for argv in ([str(cli), "--version"], [sys.executable, "-m", "calving.ingest.cli", "--help"]):
        done = subprocess.run(
            argv, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert "shadowed" not in done.stdout + done.stderr
    version = subprocess.run(
        [str(cli), "--version"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert version.stdout.strip() == f"calving {calving.__version__}"
