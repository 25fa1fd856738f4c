"""Signing and verifying a 1 GB model folder with OpenSSF model-signing (BLAKE3, and the
SHA-256 file serialization the upstream CLI checks) against our Merkle verify of the
same folder, warm page cache, rounds interleaved; the baseline is our verify, measured
in the same run. The sign time is what signing adds to a release per model folder."""

from __future__ import annotations

import os
import statistics
import tempfile
import time

SHARDS, SHARD_BYTES = 4, 256 * 1024 * 1024  # 1 GiB in four safetensors-sized shards


def _folder(path: str) -> int:
    from kfp_llmops.components.common import integrity

    os.makedirs(path)
    block = os.urandom(16 * 1024 * 1024)
    for i in range(SHARDS):
        with open(os.path.join(path, f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"), "wb") as handle:
            for _ in range(SHARD_BYTES // len(block)):
                handle.write(block)
    with open(os.path.join(path, "config.json"), "w") as handle:
        handle.write("{}")
    integrity.seal("model", path)
    return SHARDS * SHARD_BYTES


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main(rounds: int = 5) -> dict:
    from kfp_llmops.components.common import integrity, signing

    with tempfile.TemporaryDirectory() as work:
        folder = os.path.join(work, "model")
        size = _folder(folder)
        signing.generate_keys(os.path.join(work, "k.pem"), os.path.join(work, "k.pub"))
        key, pub = os.path.join(work, "k.pem"), os.path.join(work, "k.pub")
        sig = {h: os.path.join(work, f"{h}.sig") for h in signing.HASHES}
        cases = {
            "merkle_verify": lambda: integrity.verify("model", folder),
            **{f"sign_{h}": (lambda h=h: signing.sign_folder(folder, key, sig[h], h)) for h in signing.HASHES},
            **{f"verify_{h}": (lambda h=h: signing.verify_folder(folder, pub, sig[h])) for h in signing.HASHES},
        }
        integrity.verify("model", folder)  # warm the page cache
        times = {name: [] for name in cases}
        for _ in range(rounds):
            for name, fn in cases.items():  # interleaved
                times[name].append(_timed(fn))
    base = statistics.median(times["merkle_verify"])
    return {
        "bytes": size,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        **{
            name: {
                "median_s": round(statistics.median(v), 3),
                "min_s": round(min(v), 3),
                "max_s": round(max(v), 3),
                "mb_per_s": round(size / 1e6 / statistics.median(v), 1),
                "vs_merkle_verify": round(statistics.median(v) / base, 2),
            }
            for name, v in times.items()
        },
    }


def report(r: dict) -> str:
    lines = [
        f"Signing a {r['bytes'] / 2**30:.0f} GiB model folder ({r['rounds']} rounds interleaved, warm cache, "
        f"{r['cpus']} CPUs): time relative to our Merkle verify of the same folder"
    ]
    for name in ("merkle_verify", "sign_blake3", "verify_blake3", "sign_sha256", "verify_sha256"):
        s = r[name]
        lines.append(
            f"  {name:<14} {s['median_s']:6.2f} s ({s['min_s']:.2f}-{s['max_s']:.2f})  "
            f"{s['mb_per_s']:7.1f} MB/s  x{s['vs_merkle_verify']:.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(main()))
