import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("LLMOPS_NO_PROGRESS", "1")
# Build the demo Detoxify checkpoint afresh per test session, as a new machine would.
os.environ.setdefault("LLMOPS_CACHE", tempfile.mkdtemp(prefix="llmops-cache-"))
