"""An imported checkpoint is loaded only when it verifies to the root pinned with it:
refused without one, refused (naming what is there) with another, and copied then
verified again where training resumes from it."""

import json
import os

import pytest

from kfp_llmops.components.common import integrity, merkle
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.training import _seed_from
from kfp_llmops.components.training.checkpoints import commit


def _checkpoint(root_dir, tag, payload: bytes) -> str:
    staging = os.path.join(root_dir, ".staging")
    os.makedirs(os.path.join(staging, tag, "global_step"), exist_ok=True)
    with open(os.path.join(staging, tag, "global_step", "model_states.pt"), "wb") as handle:
        handle.write(payload)
    return commit(root_dir, staging, tag, [], merkle.DEFAULT_CHUNK_SIZE, {"step": int(tag[-2:])}).root


def test_only_the_pinned_checkpoint_is_taken(tmp_path):
    earlier = str(tmp_path / "earlier")
    first = _checkpoint(earlier, "step-00000003", b"three")
    newest = _checkpoint(earlier, "step-00000006", b"six")
    with pytest.raises(InputError, match="no pinned checkpoint root"):
        _seed_from(earlier, str(tmp_path / "a"), None)
    with pytest.raises(InputError, match=rf"no checkpoint verifies to the pinned root {'0' * 16}… .*step-00000006: "):
        _seed_from(earlier, str(tmp_path / "b"), "0" * 64)
    assert not os.path.exists(tmp_path / "b")  # nothing copied
    # the pinned one, not the newest
    assert _seed_from(earlier, str(tmp_path / "c"), first) == "step-00000003"
    assert os.listdir(tmp_path / "c") == ["step-00000003"]
    assert integrity.verify("checkpoint", str(tmp_path / "c" / "step-00000003"), first) == first
    # through the artifact's location.json (checkpoints on a claim)
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact" / "location.json").write_text(json.dumps({"checkpoint_dir": earlier}))
    assert _seed_from(str(tmp_path / "artifact"), str(tmp_path / "d"), newest) == "step-00000006"
    # a pinned checkpoint changed after it was pinned: not intact, not loaded
    with open(os.path.join(earlier, "step-00000006", "global_step", "model_states.pt"), "wb") as handle:
        handle.write(b"SIX")
    with pytest.raises(InputError, match="step-00000006: .*differ|step-00000006: .*mismatch|no checkpoint verifies"):
        _seed_from(earlier, str(tmp_path / "e"), newest)
    assert not os.path.exists(tmp_path / "e")
