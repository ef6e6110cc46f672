"""`make bench`: every benchmark, sized for the machine it runs on.

On a CPU machine the sizes are small (the numbers show ratios, not GPU throughput);
with CUDA, the sizes recorded in docs/gpu-runs.md. Each script prints its ratios
measured side by side in one run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> int:
    cuda = torch.cuda.is_available()
    runs = [
        ["sampling_core.py"]
        + (
            ["--device", "cuda", "--rows", "1024"]
            if cuda
            else ["--device", "cpu", "--rows", "16", "--repeats", "5"]
        ),
        ["engine_throughput.py"] + ([] if cuda else ["--quick"]),
        *([["probs_kernel_sweep.py", "", "PREFETCH=0", "BLOCK=8192"]] if cuda else []),
        ["calibration_reference.py", "--replications", "200" if not cuda else "1000"],
        ["weight_cache_digest.py", "--runs", "3"],
    ]
    status = 0
    for script, *args in runs:
        path = HERE / script
        if not path.exists():
            print(f"skip {script}: not present", flush=True)
            continue
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        status |= subprocess.call([sys.executable, str(path), *args])
    return status


if __name__ == "__main__":
    sys.exit(main())
