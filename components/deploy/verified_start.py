"""Verify, then serve: the predictor's command in the cluster.

KServe runs the Triton runtime's arguments (`tritonserver --model-store=/mnt/models ...`,
the InferenceService's own appended) after this module's command. It re-hashes the
repository the storage initializer fetched against the root the InferenceService names
(`LLMOPS_REPOSITORY_ROOT`) and only then replaces itself with the server, same process,
same arguments. The check is the image's code, not the repository's: a model.py changed
in storage cannot vouch for itself (the served model also re-hashes its folder as it
loads, but a rewritten model.py would skip that).

`python3 -m kfp_llmops.components.deploy.verified_start tritonserver --model-store=DIR ...`
"""

from __future__ import annotations

import os
import sys

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError

from .triton_local import REPOSITORY_ROOT_ENV

STORE_FLAGS = ("--model-store", "--model-repository")  # Triton's two names for it


def model_store(argv: list[str]) -> str:
    """The one repository folder the server's arguments name (`--model-store=DIR` or
    `--model-store DIR`); InputError when none or several."""
    found = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in STORE_FLAGS:
            found.append(value if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    if len(found) != 1:
        raise InputError(
            f"the server's arguments name {len(found)} model repositories ({'/'.join(STORE_FLAGS)}), not one"
        )
    if not found[0]:
        raise InputError(f"{'/'.join(STORE_FLAGS)}: no folder given")
    return found[0]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.exit("usage: python3 -m kfp_llmops.components.deploy.verified_start SERVER [ARGS...]")
    try:
        store = model_store(argv)
        root = os.environ.get(REPOSITORY_ROOT_ENV, "")
        if not root:
            raise InputError(f"{REPOSITORY_ROOT_ENV} is not set: no repository root to verify {store} against")
        integrity.verify("repository", store, root)
    except InputError as exc:
        sys.exit(f"refusing to serve: {exc}")
    print(f"verified {store} (repository root {root}); starting {argv[0]}", flush=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
