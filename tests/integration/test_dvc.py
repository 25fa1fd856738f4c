"""DVC versioning of the clean dataset against a real local remote."""

import os

from helpers import sft, write_lines
from kfp_llmops.components.data_validation import run_to_dir


def test_clean_data_is_added_and_pushed_to_a_local_remote(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [sft(i) for i in range(30)])
    remote = tmp_path / "remote"
    repo = tmp_path / "repo"
    result = run_to_dir(
        src,
        str(tmp_path / "out"),
        show_progress=False,
        overrides={"dvc.enabled": True, "dvc.repo_dir": str(repo), "dvc.remote_url": str(remote)},
    )
    info = result.metrics["dvc"]
    md5 = info["md5"]
    assert info["remote"] == str(remote)
    # DVC 3 content-addressed layout: files/md5/<2>/<30>
    pushed = remote / "files" / "md5" / md5[:2] / md5[2:]
    assert pushed.is_file()
    assert pushed.read_bytes() == (tmp_path / "out" / "clean.jsonl").read_bytes()
    assert (repo / "clean.jsonl.dvc").is_file()
    # A second run with the same data is idempotent.
    again = run_to_dir(
        src,
        str(tmp_path / "out2"),
        show_progress=False,
        overrides={"dvc.enabled": True, "dvc.repo_dir": str(repo), "dvc.remote_url": str(remote)},
    )
    assert again.metrics["dvc"]["md5"] == md5
    assert os.path.exists(repo / ".dvc")
