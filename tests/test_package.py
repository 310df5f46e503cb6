"""The project as a package: a wheel and an sdist that build, carry the project's metadata, and
give a working ``stockade demo`` when the wheel is installed into a fresh virtual environment.

Slow (about a minute: the build, then pip installing the wheel's dependencies, from its cache
when it has them), and kept in the suite: it is what a user who installs Stockade runs into.
"""

from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, built as ``python -m build`` builds them (the wheel from the
    sdist)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("stockade-*.whl")
    (sdist,) = out.glob("stockade-*.tar.gz")
    return wheel, sdist


def test_the_wheel_carries_the_projects_metadata_license_and_types(
    built: tuple[Path, Path],
) -> None:
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
    assert metadata["Name"] == "stockade"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert metadata["Summary"]
    assert "Quickstart" in (metadata.get_payload() or "")  # the README as the description
    requires = metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("pydantic") for r in requires)
    assert any(r.startswith("pycasbin") for r in requires)
    for typed in ("stockade/py.typed", "stockade/engine/py.typed", "stockade/policies/py.typed"):
        assert typed in names


def test_the_sdist_holds_the_sources_license_and_presets(built: tuple[Path, Path]) -> None:
    _, sdist = built
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if "/" in m.name}
    for name in (
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "stockade/engine/pipeline/engine.py",
        "stockade/policies/presets/default.toml",
        "stockade/sandbox/vfs.py",
    ):
        assert name in members, name
        assert members[name].isfile(), f"{name} is a link: a wheel built from the sdist breaks"


def test_the_wheel_installed_into_a_fresh_venv_runs_the_demo(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    wheel, _ = built
    home = tmp_path / "venv"
    venv.create(home, with_pip=True)
    install = subprocess.run(
        [str(home / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    demo = subprocess.run(
        [str(home / "bin" / "stockade"), "demo", "--workspace", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": f"{home / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"},
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "every call ended as expected" in demo.stdout
    verify = subprocess.run(
        [str(home / "bin" / "stockade"), "audit", "verify", "--workspace", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": f"{home / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    version = subprocess.run(
        [str(home / "bin" / "stockade"), "version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == "0.1.0"
