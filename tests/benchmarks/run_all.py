"""`make bench`: every benchmark, ratios against baselines measured in the same run.
Results also land in build/bench/results.json."""
import json
import os

from tests.benchmarks import bench_data


def main() -> None:
    os.makedirs("build/bench", exist_ok=True)
    data = bench_data.main()
    print(bench_data.report(data))
    with open("build/bench/results.json", "w") as handle:
        json.dump({"data": data}, handle, indent=2)
    print("\nfull results: build/bench/results.json")


if __name__ == "__main__":
    main()
