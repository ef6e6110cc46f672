"""Where the wall clock of a graphed, steady-state engine run goes on the host.

``bench/round_profile.py`` measures device time per phase with the rounds run eagerly;
this script measures the other side: the real (CUDA-Graph-replayed) run of
``bench/engine_throughput.py``'s steady-state workload (``--waves`` x concurrency random
requests, at most ``concurrency`` in flight), with perf_counter timers around each
host-side phase of every engine step, per mode:

- ``admit``: moving waiting requests into free slots (and their device parameters);
- ``prefill``: launching the prefill forward of the admitted requests (eager);
- ``round``: launching the round (graph replay, output clones);
- ``submit``: queuing the device-to-host copies of its results;
- ``wait``: blocking until the results of the round being collected are on the host
  (device time the host could not hide; ~0 means the device waited for the host);
- ``commit``: applying collected prefills and rounds to the host records;
- ``other``: the rest of ``LLM.step`` (bookkeeping around the runner's step).

``--runtime-calls`` adds one more run under torch.profiler that counts the CUDA runtime
calls the host made (graph launches, kernel launches of eager work, synchronisations,
copies), per step; it is slow on the rounds' 6,000-node graphs (minutes at c = 64 on an
H200), so it is off by default. Nothing is asserted; the table says which phase to
remove.

    python3 bench/host_timeline.py --device cuda --preset small --concurrency 64
    python3 bench/host_timeline.py --device cpu --preset tiny --concurrency 4 --max-tokens 16
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict

import _checkout  # noqa: F401  (this checkout first on sys.path)
import torch
from engine_throughput import capture_at_first_use, prompts, sampling

from bench.engine_args import engine_parser
from engine_under_test import LLM, ModelConfig, SpeculativeConfig
from engine_under_test.model import build_model

PHASES = ("admit", "prefill", "round", "submit", "wait", "commit", "other")
# Runner attributes timed as each phase (those a runner lacks are skipped).
TIMED = {
    "admit": "admit",
    "run_prefill": "prefill",
    "run_round": "round",
    "apply_prefill": "commit",
    "apply_round": "commit",
}
RUNTIME_CALLS = (
    "cudaGraphLaunch",
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaMemcpyAsync",
    "cudaEventSynchronize",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaHostAlloc",
    "cudaStreamWaitEvent",
)


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.enabled = False

    def wrap(self, obj, attr: str, phase: str) -> None:
        fn = getattr(obj, attr)

        @functools.wraps(fn)
        def timed(*a, **kw):
            if not self.enabled:
                return fn(*a, **kw)
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[phase] += time.perf_counter() - t0
                self.calls[phase] += 1

        setattr(obj, attr, timed)


def instrument(llm: LLM) -> Timers:
    timers = Timers()
    runner = llm.runner
    for attr, phase in TIMED.items():
        if hasattr(runner, attr):
            timers.wrap(runner, attr, phase)
    timers.wrap(runner.transfer, "submit", "submit")
    timers.wrap(runner.transfer, "wait", "wait")
    timers.wrap(llm, "step", "step")
    return timers


def timed_run(llm: LLM, timers: Timers, ps, params, device) -> dict:
    if device.type == "cuda":
        torch.cuda.synchronize()
    timers.seconds.clear(), timers.calls.clear()
    rounds0, prefills0 = llm.runner.rounds_run, llm.runner.prefills_run
    timers.enabled = True
    t0 = time.perf_counter()
    outs = llm.generate(ps, params)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    timers.enabled = False
    sec = dict(timers.seconds)
    inner = sum(v for k, v in sec.items() if k != "step")
    sec["other"] = sec.pop("step", 0.0) - inner
    return {
        "wall": wall,
        "tokens": sum(len(o.token_ids) for o in outs),
        "steps": timers.calls["step"],
        "rounds": llm.runner.rounds_run - rounds0,
        "prefills": llm.runner.prefills_run - prefills0,
        "seconds": sec,
    }


def runtime_calls(llm: LLM, ps, params) -> dict[str, int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.generate(ps, params)
        torch.cuda.synchronize()
    counts = {e.key: e.count for e in prof.key_averages() if e.key in RUNTIME_CALLS}
    return {k: counts.get(k, 0) for k in RUNTIME_CALLS}


def main(argv=None) -> int:
    ap = engine_parser(__doc__.splitlines()[0], concurrency="64")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--waves", type=int, default=4)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--draft-loops", type=int, default=2)
    ap.add_argument(
        "--runtime-calls",
        action="store_true",
        help="also count CUDA runtime calls per step under torch.profiler (slow)",
    )
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = (
        getattr(torch, args.dtype)
        if args.dtype
        else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    )
    model = build_model(ModelConfig.preset(args.preset), device, dtype)
    spec = SpeculativeConfig(args.k, "block", args.draft_loops)
    print(
        f"# preset={args.preset} device={device} dtype={dtype} K={args.k} d={args.draft_loops} "
        f"max_tokens={args.max_tokens} waves={args.waves}; per step: host ms in each phase"
    )
    for c in [int(x) for x in args.concurrency.split(",")]:
        ps = prompts(c * args.waves, model.cfg.vocab_size)
        params = sampling("random", c * args.waves, args.max_tokens)
        for mode in args.modes.split(","):
            kw = dict(model=model, device=device, max_num_seqs=c)
            if mode != "nospec":
                kw.update(speculative_config=spec, async_scheduling=mode == "async")
            llm = LLM(**kw)
            capture_at_first_use(llm)
            timers = instrument(llm)
            llm.generate(ps, params)  # warm-up: cache at full size, every graph captured
            r = timed_run(llm, timers, ps, params, device)
            n = max(r["steps"], 1)
            cells = " ".join(f"{p} {1e3 * r['seconds'].get(p, 0.0) / n:6.2f}" for p in PHASES)
            print(
                f"c={c:>5} {mode:>6}: {r['tokens'] / r['wall']:9.1f} tok/s, "
                f"{1e3 * r['wall'] / n:6.2f} ms/step over {r['steps']} steps "
                f"({r['rounds']} rounds, {r['prefills']} prefills) | {cells}",
                flush=True,
            )
            if device.type == "cuda" and args.runtime_calls:
                calls = runtime_calls(llm, ps, params)
                print(
                    "         runtime calls per step: "
                    + " ".join(f"{k} {v / n:.1f}" for k, v in calls.items() if v),
                    flush=True,
                )
            llm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
