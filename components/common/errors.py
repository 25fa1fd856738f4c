"""User-facing errors. Each carries its exit code and a one-line message; no traceback
ever reaches the user (see `pipelines.cli.main`)."""

import errno
import os
from typing import NoReturn


class LlmopsError(Exception):
    """An error whose message is meant for the user, as one line."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class InputError(LlmopsError):
    """Unusable input or configuration: missing, unreadable, binary, empty, invalid."""

    exit_code = 2


class GateFailed(LlmopsError):
    """A stage ran to completion but its quality gate said no (outputs are written)."""

    exit_code = 1


class EnvironmentProblem(LlmopsError):
    """The machine said no: out of space, over quota, read-only or not permitted. Not the
    input and not a bug: exit 2, with the path and the free space to act on."""

    exit_code = 2


# errno -> what the user is told; what a stage's outputs can meet on a volume
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def free_space(path: str) -> str:
    """ "<free> free of <total> on <mount point>" for the volume holding `path` (or its
    nearest existing parent)."""
    import shutil

    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    mount = where
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    try:
        usage = shutil.disk_usage(where)
    except OSError:
        return f"free space on {mount} unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)} on {mount}"


def _environment_cause(exc: BaseException | None) -> OSError | None:
    """The full disk (or the like) behind `exc`: itself, or what it was raised while
    handling. torch's zip writer, cleaning up after a write that failed, raises its own
    RuntimeError ("unexpected pos ...") over the writer's OSError."""
    for _ in range(8):
        if exc is None:
            return None
        if isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def environment_problem(
    exc: BaseException, path: str | None = None, operation: str = "writing"
) -> EnvironmentProblem | None:
    """`exc` as one line naming the operation, the path and the free space, when it is one
    of ENVIRONMENT_ERRNOS; else None (the caller re-raises it)."""
    if isinstance(exc, EnvironmentProblem):
        return exc
    exc = _environment_cause(exc)
    if exc is None:
        return None
    path = path or exc.filename
    where = f" {path}" if path else ""
    space = f" ({free_space(path)})" if path and exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return EnvironmentProblem(f"{operation}{where}: {ENVIRONMENT_ERRNOS[exc.errno]}{space}")


def raise_as_environment_problem(exc: BaseException, path: str | None = None, operation: str = "writing") -> NoReturn:
    """Inside an `except`: raise `exc` as its one-line EnvironmentProblem (naming `path`
    and `operation`) when it is one, else `exc` itself."""
    problem = environment_problem(exc, path, operation)
    if problem is None:
        raise exc
    raise problem from None
