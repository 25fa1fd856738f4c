"""The package's one native part, built with it: the data stage's plain-rows C
(components/data_validation/plain_rows.c, which includes pii_rows.c), compiled by
`pip install` or the image build into `data_validation/_plain_rows*.so`, never at run
time. Everything else about the package is in pyproject.toml.

`LLMOPS_NATIVE=0 pip install .` builds without it (the images that never validate data);
the data stage then refuses to run unless LLMOPS_PURE_PYTHON=1 asks for its Python path."""

import hashlib
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["components/data_validation/plain_rows.c", "components/data_validation/pii_rows.c"]


def sources_digest() -> str:
    """What the library is built from, compiled into it: the loader compares it with the
    sources installed beside it, so a library built from other sources is never run."""
    digest = hashlib.sha256()
    for path in SOURCES:
        with open(os.path.join(HERE, path), "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


class BuildNative(build_ext):
    """build_ext whose failure says what to do in one line."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # CompileError, LinkError, no compiler at all
            raise SystemExit(
                f"error: kfp-llmops: the data stage's C extension did not build ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}); install a C compiler "
                "(gcc or clang) and reinstall, or build without it: LLMOPS_NATIVE=0 pip install ."
            ) from None


native = os.environ.get("LLMOPS_NATIVE", "1") != "0"
setup(
    ext_modules=[
        Extension(
            "kfp_llmops.components.data_validation._plain_rows",
            sources=SOURCES[:1],
            depends=SOURCES[1:],
            define_macros=[("LLMOPS_SOURCES_SHA256", f'"{sources_digest()}"')],
            extra_compile_args=["-O2", "-std=c99"],
        )
    ]
    if native
    else [],
    cmdclass={"build_ext": BuildNative},
)
