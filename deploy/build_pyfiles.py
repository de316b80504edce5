"""Build the zip that spark-submit ships with --py-files: calving's own packages laid out
as installed (calving/, calving/commit/, calving/ingest/), read from the package list and
the package-dir mapping in pyproject.toml, so this zip and pip's install never disagree.

    python deploy/build_pyfiles.py REPO OUT_DIR   # prints the zip's path
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib


def package_sources(repo: Path) -> dict[str, Path]:
    """Installed package name -> its folder in the source tree (longest mapped prefix)."""
    tool = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    packages: list[str] = tool["setuptools"]["packages"]
    mapping: dict[str, str] = tool["setuptools"]["package-dir"]
    sources = {}
    for package in packages:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in mapping:
                sources[package] = repo / mapping[prefix] / Path(*parts[cut:])
                break
        else:
            raise SystemExit(f"pyproject.toml: package {package!r} has no package-dir entry")
    return sources


def version(repo: Path) -> str:
    """``__version__`` of the calving package (the one source of the version)."""
    init = package_sources(repo)["calving"] / "__init__.py"
    for line in init.read_text(encoding="utf-8").splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit(f"{init}: no __version__")


def build(repo: Path, out: Path) -> Path:
    target = out / f"calving-{version(repo)}-pyfiles.zip"
    partial = out / (target.name + ".partial")
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for package, folder in sorted(package_sources(repo).items()):
            arc_dir = Path(*package.split("."))
            for path in sorted(folder.iterdir()):
                if path.is_file() and (path.suffix == ".py" or path.name == "py.typed"):
                    z.write(path, (arc_dir / path.name).as_posix())
    partial.replace(target)
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: build_pyfiles.py REPO OUT_DIR")
    print(build(Path(sys.argv[1]).resolve(), Path(sys.argv[2])))
