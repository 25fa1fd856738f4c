"""kfp-llmops components: one package per release stage, plus the shared `common` helpers."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("kfp-llmops")
except _metadata.PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
