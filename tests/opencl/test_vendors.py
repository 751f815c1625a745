"""Registration of pip-installed OpenCL drivers with the ICD loader (`hal_opencl.vendors`): the
file logic runs everywhere on temporary folders; the last test needs Intel's runtime (the
`intel-opencl` extra) and checks that a fresh process lists it with no setup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hal_opencl import vendors

REPO = Path(__file__).resolve().parents[2]


def test_the_icd_names_the_library_and_follows_it(tmp_path: Path) -> None:
    library = tmp_path / "lib" / "libintelocl.so"
    icd = tmp_path / "vendors" / vendors.ICD_NAME
    assert vendors.write_icd(icd.parent, library)
    assert icd.read_text() == f"{library}\n"
    written = icd.stat().st_mtime_ns
    assert vendors.write_icd(icd.parent, library) and icd.stat().st_mtime_ns == written
    moved = tmp_path / "elsewhere" / "libintelocl.so"
    assert vendors.write_icd(icd.parent, moved) and icd.read_text() == f"{moved}\n"
    assert vendors.write_icd(icd.parent, None) and not icd.exists()  # uninstalled: removed
    assert [p.name for p in icd.parent.iterdir()] == []  # no temporary file left behind


def test_register_writes_beside_the_bundled_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "libintelocl.so"
    monkeypatch.setattr(vendors, "intel_library", lambda: library)
    monkeypatch.setattr(vendors, "loader_directory", lambda: tmp_path)
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    vendors.register()
    assert (tmp_path / vendors.ICD_NAME).read_text() == f"{library}\n"
    assert "OCL_ICD_VENDORS" not in os.environ


def test_without_a_writable_loader_folder_the_process_points_the_loader_at_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = tmp_path / "libintelocl.so"
    system = tmp_path / "etc"
    system.mkdir()
    (system / "gpu.icd").write_text("/usr/lib/libgpu.so\n")
    monkeypatch.setattr(vendors, "intel_library", lambda: library)
    monkeypatch.setattr(vendors, "loader_directory", lambda: None)
    monkeypatch.setattr(vendors, "SYSTEM_VENDORS", system)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OCL_ICD_VENDORS", "/users/own/choice")
    vendors.register()  # the user's choice stands
    assert os.environ["OCL_ICD_VENDORS"] == "/users/own/choice"
    monkeypatch.delenv("OCL_ICD_VENDORS")
    vendors.register()
    own = Path(os.environ["OCL_ICD_VENDORS"])
    assert own == vendors.fallback_directory() and own.is_relative_to(tmp_path / "cache")
    assert (own / vendors.ICD_NAME).read_text() == f"{library}\n"
    assert (own / "system-gpu.icd").read_text() == "/usr/lib/libgpu.so\n"  # nothing hidden


def test_pyopencl_bundles_the_loader_this_relies_on() -> None:
    directory = vendors.loader_directory()
    assert directory is not None and directory.name == ".libs"


def test_a_fresh_process_lists_intel_once_installed() -> None:
    if vendors.intel_library() is None:
        pytest.skip("Intel's CPU runtime is not installed (pip install -e '.[intel-opencl]')")
    code = (
        "import tile; print([d.description for d in tile.devices()]); "
        "print(tile.device('opencl:intel').description)"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OCL_", "TILE_"))}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("Intel(R) OpenCL"), result.stdout
