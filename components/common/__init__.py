"""Helpers shared by every stage: errors, config loading, Merkle manifests, artifact I/O."""
