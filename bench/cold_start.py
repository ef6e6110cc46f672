"""Benchmark: the cold start of a GPU run, each phase in a fresh process.

fp32_t2's wall time before its first group is the interpreter, imports, the first CUDA
call and the seeded model build (issue 16, time to verdict). Each row runs in its own
fresh Python process (nothing warm but the OS page cache), in ABAB order, and reports
the median of ``--runs``:

- ``import torch``; the first CUDA call after it (context and allocator);
- ``build_model`` of ``--preset`` as the engine does it (device parameters first, which
  waits for CUDA to initialise, then filled one by one from the CPU generator) against
  a candidate that fills a CPU copy while CUDA initialises on a thread and moves it
  once, with the ratio; the two must give the same weights (checked: both state
  dicts compared). Not yet run on a GPU: the engine adopts the candidate only if
  this shows it pays.

    python3 bench/cold_start.py --preset small --dtype float32 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t_import = time.perf_counter() - t0
way, preset, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
sys.path.insert(0, sys.argv[4])
from engine_under_test import ModelConfig
from engine_under_test.model import LoopedLM, build_model, init_weights
from engine_under_test.model.layers import allocate
cfg = ModelConfig.preset(preset, seed=0)
t1 = time.perf_counter()
if way == "cuda_init":
    torch.empty(1, device="cuda"); torch.cuda.synchronize()
    out = {"import_torch_s": t_import, "first_cuda_call_s": time.perf_counter() - t1}
else:
    if way == "overlapped":  # the candidate
        import threading
        warming = threading.Thread(target=lambda: torch.empty(1, device="cuda"))
        warming.start()
        model = allocate(LoopedLM, cfg, dtype=dtype, device="cpu")
        init_weights(model, cfg)
        warming.join()
        model = model.to("cuda")
    else:  # sequential: the engine's build
        model = build_model(cfg, "cuda", dtype)
    torch.cuda.synchronize()
    out = {"build_s": time.perf_counter() - t1}
    if len(sys.argv) > 5:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, sys.argv[5])
print(json.dumps(out))
"""


def child(way: str, args, save: str | None = None) -> dict:
    cmd = [sys.executable, "-c", CHILD, way, args.preset, args.dtype, str(ROOT)]
    if save:
        cmd.append(save)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    rows: dict[str, list[float]] = {"import": [], "cuda": [], "overlapped": [], "sequential": []}
    for i in range(args.runs):
        first = child("cuda_init", args)
        rows["import"].append(first["import_torch_s"])
        rows["cuda"].append(first["first_cuda_call_s"])
        order = ("overlapped", "sequential") if i % 2 == 0 else ("sequential", "overlapped")
        for way in order:
            rows[way].append(child(way, args)["build_s"])
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(
        f"# preset={args.preset} dtype={args.dtype}, fresh process per row, median of {args.runs}"
    )
    print(f"import torch            {med['import']:.2f} s")
    print(f"first CUDA call         {med['cuda']:.2f} s")
    print(f"build_model sequential  {med['sequential']:.2f} s")
    print(
        f"build_model overlapped  {med['overlapped']:.2f} s  "
        f"({med['sequential'] / med['overlapped']:.2f}x faster)"
    )
    tmp = Path("/tmp/cold-start-weights")
    tmp.mkdir(exist_ok=True)
    child("overlapped", args, str(tmp / "a.pt"))
    child("sequential", args, str(tmp / "b.pt"))
    import torch

    a, b = torch.load(tmp / "a.pt"), torch.load(tmp / "b.pt")
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    print(f"weights identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
