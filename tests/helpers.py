import ipaddress
import json
import os
import subprocess
import sys

from kfp_llmops.components.data_validation import run_to_dir


def write_lines(path, lines):
    with open(path, "wb") as handle:
        for line in lines:
            handle.write((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n")
    return str(path)


def llmops(*args):
    """The CLI in a child process, as a user runs it: (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "kfp_llmops.pipelines.cli.main", *args],
        capture_output=True,
        text=True,
        env={"LLMOPS_NO_PROGRESS": "1", "PATH": ""},
    )
    return proc.returncode, proc.stdout, proc.stderr


def validate_lines(tmp_path, lines, **kwargs):
    src = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out"
    result = run_to_dir(src, str(out), show_progress=False, **kwargs)
    return result, out


def read_jsonl(path):
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def sft(i, prompt=None, response=None):
    return {"prompt": prompt or f"Question number {i}?", "response": response or f"Answer number {i}."}


def tiny_model(root, rows: int = 40):
    """A tiny tokenizer + model built on a few fixed pairs: (rows, clean path, model dir, model root)."""
    from kfp_llmops.components.training.base_model import build_base_model

    pairs = [
        {"prompt": f"Tell me about item {i} and its color.", "response": f"Item {i} is blue and round."}
        for i in range(rows)
    ]
    clean = os.path.join(str(root), "clean.jsonl")
    write_lines(clean, pairs)
    model = os.path.join(str(root), "model")
    return pairs, clean, model, build_base_model(clean, model, size="tiny")


def training_inputs(root) -> dict:
    """The demo data (600 rows) validated and a tiny base model built on it, for training
    tests: {"root", "clean", "base"}."""
    from kfp_llmops.components.training.base_model import build_base_model
    from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

    data = make_demo_dataset(str(root / "data"), rows=600)
    run_to_dir(data["train"], str(root / "valid"), show_progress=False)
    clean = str(root / "valid" / "clean.jsonl")
    base = str(root / "base")
    build_base_model(clean, base, size="tiny")
    return {"root": root, "clean": clean, "base": base}


def losses(run_dir) -> list[tuple[int, float]]:
    """(step, loss) of every step a training run logged."""
    return [(row["step"], row["loss"]) for row in read_jsonl(os.path.join(run_dir, "train_log.jsonl"))]


def flip_byte(path, offset: int) -> None:
    """Flip the lowest bit of one byte in place; flipping it again restores the file."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 1]))


__all__ = [
    "write_lines",
    "validate_lines",
    "read_jsonl",
    "sft",
    "tiny_model",
    "training_inputs",
    "losses",
    "flip_byte",
    "os",
]


def docker(*args, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def fs_group(path: str, gid: int) -> None:
    """What the kubelet does to a volume for the pod's fsGroup: group-owned, group-writable."""
    for root, dirs, files in os.walk(path):
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            os.chown(name, -1, gid)
            os.chmod(name, os.stat(name).st_mode | 0o060 | (0o2010 if os.path.isdir(name) else 0))


# What the serving tests ask: two texts and a chat that goes on from an assistant's turn.
SERVED_PROMPTS = [
    "Tell me about item 3 and its color.",
    "Tell me about item 17 and its color.",
    [
        {"role": "user", "content": "Tell me about item 5."},
        {"role": "assistant", "content": "It is red."},
        {"role": "user", "content": "And item 9?"},
    ],
]


def serve_process(state: str, *args: str):
    """`llmops deploy serve --state STATE ARGS` started (its stdout a pipe): the process."""
    return subprocess.Popen(
        [sys.executable, "-m", "kfp_llmops.pipelines.cli.main", "deploy", "serve", "--state", state, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LLMOPS_NO_PROGRESS": "1"},
    )


def descendants(pid: int) -> set[int]:
    """`pid` and every process under it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def listening(pids: set[int]) -> set[tuple[str, int]]:
    """The TCP addresses (IPv4 and IPv6) these processes listen on: (address, port), from /proc."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="utf-8") as handle:
            for row in handle.readlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    addr, port = cols[1].split(":")
                    if len(addr) == 8:
                        ip = ".".join(str(int(addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
                    else:  # IPv6, as the kernel prints it: four little-endian words
                        words = [addr[i : i + 8] for i in range(0, 32, 8)]
                        raw = bytes.fromhex("".join(w[6:8] + w[4:6] + w[2:4] + w[0:2] for w in words))
                        six = ipaddress.IPv6Address(raw)
                        ip = str(six.ipv4_mapped or six)  # gRPC listens on ::ffff:127.0.0.1
                    out.add((ip, int(port, 16)))
    return out
