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
