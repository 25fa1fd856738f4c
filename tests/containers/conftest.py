"""`make test` builds the stage images beside the other tests and names the file its build
writes its exit status to (LLMOPS_IMAGES_STATUS): the image tests, collected last, wait
for it here and fail with the build log's last lines if it failed."""

import os
import time

import pytest

WAIT_S = 3600.0


@pytest.fixture(scope="session", autouse=True)
def images_built():
    status = os.environ.get("LLMOPS_IMAGES_STATUS")
    if not status:
        return
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(status):
        if time.monotonic() > deadline:
            pytest.fail(f"{status}: the image build did not finish within {WAIT_S:.0f} s")
        time.sleep(2)
    code = open(status).read().strip()
    if code != "0":
        log = os.path.join(os.path.dirname(status), "images.log")
        tail = open(log).read().splitlines()[-5:] if os.path.exists(log) else []
        pytest.fail(f"make images failed (exit {code}, {log}):\n" + "\n".join(tail))
