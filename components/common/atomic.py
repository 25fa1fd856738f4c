"""The one way files are replaced: written beside their final name, fsynced, renamed
over it, and the directory fsynced, so a crash leaves the old file or the new one, never
a torn mix. Everything a later stage or a restart reads goes through here."""

from __future__ import annotations

import json
import os
import secrets
from typing import BinaryIO


def fsync_dir(path: str) -> None:
    """Make a rename in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exclusive(folder: str, name: str) -> tuple[str, int]:
    """A new file beside `name` that nobody else writes: a name of its own per writer (two
    writers of one file never share a partial file), created exclusively and never through
    a link planted at that name. Mode as `open` gives (the umask's), not mkstemp's 0600:
    the images' user reads what a root process wrote."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = os.path.join(folder, f"{name}.{secrets.token_hex(4)}.partial")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def fsync_tree(path: str) -> None:
    """Every file and folder under `path` on disk, folders after what they hold (a copy
    that a pointer is about to name must be there after a power cut, not only its name)."""
    for folder, _, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


class AtomicFile:
    """A binary file that appears at `path` only on `commit()`; `abort()` (or an
    exception inside `with`) leaves `path` as it was. Streams of any size."""

    def __init__(self, path: str, durable: bool = True, buffering: int = 1 << 20):
        self.path, self.durable = path, durable
        folder, name = os.path.split(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        try:
            self.tmp, fd = _exclusive(folder, name)
            self.handle: BinaryIO = os.fdopen(fd, "wb", buffering=buffering)
        except OSError as exc:
            from .errors import environment_problem

            raise (environment_problem(exc, path) or exc) from None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self._failed(exc)

    def commit(self) -> None:
        try:
            self.handle.flush()
            if self.durable:
                os.fsync(self.handle.fileno())
            self.handle.close()
            os.replace(self.tmp, self.path)
            if self.durable:
                fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError):
        """The partial file removed (it holds space and is not the file), and a full disk,
        quota, read-only volume or refused permission said as one line naming `path`."""
        from .errors import environment_problem

        problem = environment_problem(exc, self.path)  # the free space as it was when it failed
        self.abort()
        if problem is None:
            raise exc
        raise problem from None

    def abort(self) -> None:
        try:
            self.handle.close()
        except OSError:
            pass  # the buffer could not be flushed: the partial file goes anyway
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def write_bytes(path: str, data: bytes, durable: bool = True) -> None:
    with AtomicFile(path, durable) as out:
        out.write(data)


def write_text(path: str, text: str, durable: bool = True) -> None:
    write_bytes(path, text.encode("utf-8"), durable)


def write_json(path: str, data, durable: bool = True, **dump) -> None:
    """JSON (indent 2 unless told) written atomically; non-JSON values via `default`."""
    dump.setdefault("indent", 2)
    write_text(path, json.dumps(data, **dump) + "\n", durable)


def copy_file(source: str, dest: str, durable: bool = True) -> None:
    """`source` copied to `dest` atomically, a full disk said naming `dest`."""
    import shutil

    with open(source, "rb") as src, AtomicFile(dest, durable) as out:
        shutil.copyfileobj(src, out)


def copy2(source: str, dest: str) -> str:
    """shutil.copy2, with a full disk (or the like) said as one line naming `dest`. As a
    copytree `copy_function` it also stops the copy at the first such file, where
    shutil.copytree would collect every OSError into one shutil.Error without an errno."""
    import shutil

    try:
        return shutil.copy2(source, dest)
    except OSError as exc:
        import errno

        from .errors import raise_as_environment_problem

        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            try:  # a copy cut short is not the file, and holds the space
                os.unlink(dest)
            except OSError:
                pass
        raise_as_environment_problem(exc, dest, "copying to")


def copy_tree(source: str, dest: str, link: bool = True, copy_function=copy2) -> str:
    """`source` copied to `dest` whole or not at all: copied beside it under a name of its
    own, on disk (files and folders fsynced) before it takes `dest`'s name; a `dest` that
    was there is swapped with it in one step (moved aside where the file system cannot)
    and removed only once the copy holds its name: never deleted before. With
    `link`, hard links where both are on one volume, so a second copy of the weights costs
    nothing; `copy_function` copies a file otherwise."""
    import shutil

    parent, name = os.path.split(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    partial = os.path.join(parent, f"{name}.{secrets.token_hex(4)}.partial")
    try:
        linked = False
        if link:
            try:
                shutil.copytree(source, partial, copy_function=os.link)
                linked = True
            except OSError:  # another volume: copied instead
                shutil.rmtree(partial, ignore_errors=True)
        if not linked:
            shutil.copytree(source, partial, copy_function=copy_function)
        fsync_tree(partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # the space it holds, and not the copy
        raise
    if not os.path.lexists(dest):
        os.replace(partial, dest)
        fsync_dir(parent)
        return dest
    old = partial  # after the exchange, the old tree is here
    if not _exchange(partial, dest):  # no RENAME_EXCHANGE here: moved aside, not deleted, first
        old = partial[: -len(".partial")] + ".old"
        os.replace(dest, old)
        os.replace(partial, dest)
    fsync_dir(parent)
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.unlink(old)
    return dest


def _exchange(a: str, b: str) -> bool:
    """Swap two names in one step (Linux renameat2 RENAME_EXCHANGE): at no instant is
    either name missing. False where the kernel, libc or file system cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    import errno

    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)
