"""`make bench`: every benchmark, ratios against baselines measured in the same run.
Results also land in build/bench/results.json. `make bench BENCH="data load"` runs just
those (a benchmark run alone, as its figures need)."""

import json
import os
import sys

from tests.benchmarks import (
    bench_ckpt,
    bench_data,
    bench_deploy,
    bench_engine,
    bench_eval,
    bench_load,
    bench_serving,
    bench_signing,
    bench_tokens,
    bench_watermark,
)


def main(only: list[str]) -> None:
    os.makedirs("build/bench", exist_ok=True)
    results = {}
    benches = (
        ("data", bench_data),
        ("tokens", bench_tokens),
        ("checkpoints", bench_ckpt),
        ("load", bench_load),
        ("evaluation", bench_eval),
        ("watermark", bench_watermark),
        ("deploy", bench_deploy),
        ("serving", bench_serving),
        ("engine", bench_engine),
        ("signing", bench_signing),
    )
    unknown = set(only) - {name for name, _ in benches}
    if unknown:
        sys.exit(f"error: no benchmark {', '.join(sorted(unknown))}; known: {', '.join(n for n, _ in benches)}")
    for name, module in benches:
        if only and name not in only:
            continue
        results[name] = module.main()
        print(module.report(results[name]), flush=True)
        print()
    with open("build/bench/results.json", "w") as handle:
        json.dump(results, handle, indent=2)
    print("full results: build/bench/results.json")


if __name__ == "__main__":
    main(sys.argv[1:])
