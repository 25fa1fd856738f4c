"""The training worker under real Open MPI, as Kubeflow Trainer's deepspeed-distributed
runtime starts it: `mpirun` runs the worker once per rank, the ranks come from Open
MPI's variables and rank 0's address from MASTER_ADDR. Two "nodes" are two network
namespaces joined by a veth pair, one rank each, each with its own hostname; mpirun
starts the second node's daemon through `ip netns exec` as its remote shell (ssh's role
in a cluster). Killing that node mid-run and running again resumes from the newest
verified checkpoint, to the per-step losses of an uninterrupted torchrun run."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import losses, training_inputs
from kfp_llmops.components.common import integrity
from kfp_llmops.components.training.config import TrainConfig
from kfp_llmops.components.training.engines import train
from kfp_llmops.components.training.launch import RunInputs, prepare, run_ranks
from kfp_llmops.components.training.trainjob import mpi_command

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (openmpi-bin) is not installed"),
]
IFACE = "llmops0"  # each node's end of the veth pair
RUN = dict(steps=120, checkpoint_interval=20, micro_batch=4, seq_len=48, chunk_size=4096, world_size=2)
# mpirun's remote shell: `AGENT [options] HOST COMMAND...` runs COMMAND in the network
# namespace HOST, under its own hostname, as ssh would on that host.
AGENT = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host="$1"; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && exec $*"
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    made = training_inputs(tmp_path_factory.mktemp("mpi"))
    reference = train(made["clean"], made["base"], str(made["root"] / "ref"), TrainConfig(**RUN))  # torchrun
    return {**made, "reference": losses(str(made["root"] / "ref")), "model_root": reference["model_root"]}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Two network namespaces joined by a veth pair: 10.77.0.1 and 10.77.0.2, each end
    named IFACE, so gloo finds its interface by one name on both nodes."""
    tag = str(os.getpid())[-5:]
    names = [f"llmops-n0-{tag}", f"llmops-n1-{tag}"]
    try:
        for name in names:
            _ip("netns", "add", name)
        _ip("link", "add", f"lv0-{tag}", "type", "veth", "peer", "name", f"lv1-{tag}")
        for i, name in enumerate(names):
            _ip("link", "set", f"lv{i}-{tag}", "netns", name)
            _ip("-n", name, "link", "set", f"lv{i}-{tag}", "name", IFACE)  # one name on every node
            _ip("-n", name, "addr", "add", f"10.77.0.{i + 1}/24", "dev", IFACE)
            _ip("-n", name, "link", "set", IFACE, "up")
            _ip("-n", name, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"network namespaces are not available here: {getattr(exc, 'stderr', b'') or exc}")
    folder = tmp_path_factory.mktemp("nodes")
    agent = folder / "netns-rsh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    hostfile = folder / "hostfile"
    hostfile.write_text("".join(f"{name} slots=1\n" for name in names))
    yield {"names": names, "agent": str(agent), "hostfile": str(hostfile)}
    for name in names:
        for pid in subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _mpirun(nodes, spec_path: str, env: dict, port: int) -> list[str]:
    """The TrainJob's command (`trainjob.mpi_command`), started inside the first node's
    namespace as on Trainer's launcher pod; here mpirun reaches the other node through
    the netns agent instead of ssh, runs as root, and is told which interface to use."""
    env["GLOO_SOCKET_IFNAME"] = IFACE
    forward = tuple(
        k for k in sorted(env) if k.startswith(("OMP_", "DS_", "PYTHON", "TOKENIZERS", "HF_", "TRANSFORMERS", "GLOO_"))
    )
    mpirun = mpi_command(
        spec_path,
        2,
        "10.77.0.1",
        hostfile=nodes["hostfile"],
        port=port,
        python=sys.executable,
        mca={"plm_rsh_agent": nodes["agent"], "oob_tcp_if_include": IFACE, "btl_tcp_if_include": IFACE},
        forward=forward,
        as_root=True,
    )
    name = nodes["names"][0]
    return [
        "ip",
        "netns",
        "exec",
        name,
        "unshare",
        "--uts",
        "sh",
        "-c",
        f"hostname {name} && exec " + " ".join(shlex.quote(a) for a in mpirun),
    ]


def test_two_nodes_under_mpirun_train_like_torchrun_and_resume_after_one_node_dies(inputs, nodes):
    out = str(inputs["root"] / "mpi")
    spec_path, spec, env = prepare(RunInputs(inputs["clean"], inputs["base"], out), TrainConfig(**RUN))
    proc = subprocess.Popen(
        _mpirun(nodes, spec_path, env, 29611), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ckpt = os.path.join(out, "checkpoints")
    deadline = time.time() + 240
    while time.time() < deadline and not integrity.list_tags(ckpt) and proc.poll() is None:
        time.sleep(0.2)
    assert integrity.list_tags(ckpt), f"no checkpoint was committed: {proc.stderr.read().decode()[-2000:]}"
    victims = subprocess.run(["ip", "netns", "pids", nodes["names"][1]], capture_output=True, text=True).stdout.split()
    assert victims, "nothing runs on the second node"
    for pid in victims:  # the second node dies: its daemon and its rank
        os.kill(int(pid), signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    killed_at = losses(out)[-1][0]
    assert killed_at < RUN["steps"], "the run finished before the node was killed"
    # Run again, as a Trainer retry would: the newest verified checkpoint, then to the end.
    result = run_ranks(_mpirun(nodes, spec_path, env, 29612), spec, env, out)
    assert result["done"] and result["resumed_from"] is not None and result["world_size"] == 2
    assert losses(out) == inputs["reference"]  # zero tolerance, torchrun's losses
    assert result["model_root"] == inputs["model_root"]
    assert (
        f"[train] 2 ranks on 2 host(s): {', '.join(sorted(nodes['names']))}"
        in open(os.path.join(out, "ranks.log")).read()
    )
