"""`llmops`, the command line: every stage on its own, the local and cluster runs,
compile targets, images and lineage (`main.py`)."""
