"""Files and trees replaced without losing what was there: each writer its own partial
file, created exclusively (a link planted at a partial name is never followed); a copied
tree on disk before it takes its name, and the tree it replaces swapped out, not deleted
first."""

import os
import threading

import pytest

from kfp_llmops.components.common import atomic


def test_two_writers_of_one_file_never_share_a_partial_file(tmp_path):
    path = tmp_path / "record.json"
    first, second = atomic.AtomicFile(str(path)), atomic.AtomicFile(str(path))
    first.write(b"A" * 10_000)
    second.write(b"B" * 20)
    first.commit()
    assert path.read_bytes() == b"A" * 10_000
    second.commit()
    assert path.read_bytes() == b"B" * 20
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


def test_a_link_planted_at_the_partial_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "out").mkdir()
    os.symlink(victim, tmp_path / "out" / "state.json.partial")  # the name a writer used to take
    atomic.write_text(str(tmp_path / "out" / "state.json"), "new")
    assert victim.read_text() == "keep me" and (tmp_path / "out" / "state.json").read_text() == "new"


def test_an_aborted_write_leaves_the_old_file_and_no_partial(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic.AtomicFile(str(path)) as out:
            out.write(b"half")
            raise RuntimeError("stop")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f"]


def _tree(root, text, files=3):
    os.makedirs(root / "sub", exist_ok=True)
    for i in range(files):
        (root / "sub" / f"w{i}").write_text(f"{text}{i}")
    (root / "config.json").write_text(text)


def _where(fd):
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.parametrize("link", [True, False])
def test_a_copied_tree_is_on_disk_before_it_takes_its_name(tmp_path, monkeypatch, link):
    _tree(tmp_path / "src", "new")
    dest = tmp_path / "dest"
    _tree(dest, "old")
    events = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", _where(fd))), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(a), str(b))), replace(a, b))[1])
    exchanged = []
    real = atomic._exchange
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: (exchanged.append(a), real(a, b))[1])
    atomic.copy_tree(str(tmp_path / "src"), str(dest), link=link)
    assert (dest / "config.json").read_text() == "new" and (dest / "sub" / "w2").read_text() == "new2"
    assert sorted(os.listdir(tmp_path)) == ["dest", "src"]  # the old tree gone, no partial left
    named = len(events) if not exchanged else None
    partial = exchanged[0] if exchanged else next(e[1] for e in events if e[0] == "replace" and e[2] == str(dest))
    synced = {e[1] for e in events[:named] if e[0] == "fsync"}
    for rel in ("config.json", "sub/w0", "sub/w1", "sub/w2", "sub", ""):
        assert os.path.normpath(os.path.join(partial, rel)) in synced, rel


def test_the_old_tree_is_never_missing_while_it_is_replaced(tmp_path):
    """A reader polling `dest` while it is replaced always finds a whole tree, old or new."""
    _tree(tmp_path / "src", "new", files=50)
    dest = tmp_path / "dest"
    _tree(dest, "old", files=50)
    if not atomic._exchange(str(tmp_path / "src"), str(tmp_path / "src")):
        pytest.skip("this file system has no RENAME_EXCHANGE (the move-aside path is used)")
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            try:
                seen.append((dest / "config.json").read_text())
            except FileNotFoundError:
                seen.append(None)

    reader = threading.Thread(target=poll)
    reader.start()
    for _ in range(20):
        atomic.copy_tree(str(tmp_path / "src"), str(dest), link=False)
    stop.set()
    reader.join()
    assert None not in seen and (dest / "config.json").read_text() == "new"
