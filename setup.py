"""The build of chaosd's compiled hot path (the rest of the package is declared in pyproject.toml).

The modules listed in chaosd/native.py are compiled with mypyc when a wheel is built, unless CHAOSD_NO_EXTENSIONS is
set (an editable install sets it). Each extension is optional: without a C compiler the build warns and the package
is plain Python. mypyc runs only when the extensions are built, not when pip asks for the metadata.
"""

from __future__ import annotations

import logging
import os
import runpy
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

COMPILED: tuple[str, ...] = runpy.run_path("chaosd/native.py")["COMPILED"]
log = logging.getLogger("chaosd.build")
PLACEHOLDER = "chaosd._compiled"  # an extension to declare, so that the wheel is built for this platform


class BuildCompiled(build_ext):
    """Stands the mypyc extensions in for the placeholder when the extensions are built, not when pip asks for the
    package's metadata (which finalizes this command too)."""

    def run(self) -> None:
        if [extension.name for extension in self.extensions] != [PLACEHOLDER]:
            super().run()
            return
        self._forget_built()
        try:
            from mypyc.build import mypycify  # noqa: PLC0415 - in the build environment of a wheel only

            extensions = mypycify(
                list(COMPILED), opt_level="3", group_name="chaosd", target_dir=os.path.join(self.build_temp, "mypyc")
            )
        except (ImportError, SystemExit) as why:  # no mypyc here, or a type error it refuses to compile
            log.warning("chaosd: the hot path is not compiled (%r): the package is plain Python", why)
            self.distribution.ext_modules = self.extensions = []
            return
        for extension in extensions:
            extension.optional = True  # no C compiler: a warning, and plain Python
        self.distribution.ext_modules = extensions
        # A command finalized afresh with them (setuptools settles each extension's build when it finalizes).
        self.distribution.reinitialize_command("build_ext")
        self.run_command("build_ext")

    def _forget_built(self) -> None:
        """Drop the extensions an earlier build left in build/: one of a module since taken off the list, or kept
        from before a build that fell back to plain Python, would go into this wheel and shadow its source."""
        built = Path(self.build_lib)
        for suffix in EXTENSION_SUFFIXES:
            for path in [*built.glob(f"chaosd__mypyc*{suffix}"), *built.glob(f"chaosd/**/*{suffix}")]:
                path.unlink()


setup(
    ext_modules=[] if os.environ.get("CHAOSD_NO_EXTENSIONS") else [Extension(PLACEHOLDER, sources=[])],
    cmdclass={"build_ext": BuildCompiled},
)
