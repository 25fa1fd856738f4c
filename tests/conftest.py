import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("LLMOPS_NO_PROGRESS", "1")
