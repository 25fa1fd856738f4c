import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("LLMOPS_NO_PROGRESS", "1")
# Build the demo Detoxify checkpoint afresh per test session, as a new machine would; the
# workers of one pytest-xdist run share it (it is built under a lock). `make test` sets it.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
os.environ.setdefault(
    "LLMOPS_CACHE",
    os.path.join(tempfile.gettempdir(), f"llmops-cache-{_RUN}") if _RUN else tempfile.mkdtemp(prefix="llmops-cache-"),
)

# The longest test files first (about 8, 6, 6 and 3 minutes under `make test`'s two
# workers): pytest-xdist hands out whole files in collection order (`make test` passes
# --no-loadscope-reorder: not the files with the most tests first), so none of them is
# left to start while the other worker has run out of work. The image tests last: under
# `make test` the images are still being built beside the other tests (containers/conftest.py).
LONGEST = ("test_kfp_local.py", "test_byo_model.py", "test_training.py", "test_evaluation.py")
IMAGE_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "containers")


def pytest_collection_modifyitems(items):
    def rank(item):
        name = os.path.basename(str(item.path))
        if str(item.path).startswith(IMAGE_TESTS + os.sep):
            return len(LONGEST) + 1
        return LONGEST.index(name) if name in LONGEST else len(LONGEST)

    items.sort(key=rank)
