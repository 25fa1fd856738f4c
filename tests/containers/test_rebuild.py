"""`make images` after each change: a rebuilt name's previous image is removed, not left
behind untagged (the deploy image alone is 3 GB)."""

import subprocess

from kfp_llmops.pipelines import containers


def test_a_rebuild_leaves_no_untagged_copy_behind(tmp_path):
    """Rebuilding a name removes the image it named before (in podman, and in dockerd after
    a load): `make images` after each change would otherwise keep gigabytes of untagged
    copies. An image a container still uses is kept, with a line saying so."""
    env = containers.podman_env(str(tmp_path / "work"))
    name = "localhost/kfp-llmops/rebuild-check:test"
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
    ids = []
    try:
        for content in ("first", "second"):
            (tmp_path / "payload").write_text(content)
            before = {name: containers.image_id("podman", name, env)}
            cmd = ["podman", "build", "--pull=never", "--format=docker", "-t", name, str(tmp_path)]
            subprocess.run(cmd, check=True, capture_output=True, env=env)
            containers.drop_superseded("podman", before, env)
            ids.append(containers.image_id("podman", name, env))
        assert ids[0] and ids[1] and ids[0] != ids[1]
        listed = subprocess.run(["podman", "images", "-q", "--no-trunc"], capture_output=True, text=True, env=env)
        assert ids[1] in listed.stdout and ids[0] not in listed.stdout
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, env=env)
