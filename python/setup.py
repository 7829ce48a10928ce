"""Builds the package with its native library.

``pip install ./python`` (from the repository) runs ``cargo build --release -p
alignmalloc-preload`` and puts ``libalignmalloc_preload.so`` in the package; with
``ALIGNMALLOC_LIBRARY`` set to a built copy it takes that one instead (a machine without Rust
installs the wheel built elsewhere: ``pip wheel ./python``).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover - wheel ships with setuptools' build environments
    bdist_wheel = None

LIBRARY = "libalignmalloc_preload.so"
REPOSITORY = Path(__file__).resolve().parent.parent


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        given = os.environ.get("ALIGNMALLOC_LIBRARY")
        if given:
            library = Path(given)
        else:
            subprocess.run(
                ["cargo", "build", "--release", "-p", "alignmalloc-preload"],
                cwd=REPOSITORY,
                check=True,
            )
            library = REPOSITORY / "target" / "release" / LIBRARY
        if not library.is_file():
            raise SystemExit(f"{library} is missing: build it or set ALIGNMALLOC_LIBRARY")
        target = Path(self.build_lib) / "alignmalloc" / LIBRARY
        shutil.copyfile(library, target)


commands = {"build_py": BuildWithLibrary}
if bdist_wheel is not None:

    class PlatformWheel(bdist_wheel):
        """The library is native code for this platform, loaded by ctypes from any Python 3."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    commands["bdist_wheel"] = PlatformWheel

setup(cmdclass=commands)
