"""Per-point outputs of a quadrature protocol's accept kernel, for comparing devices.

Runs the quadrature runner's own case loop (`specconform.runner.quadrature._run_case`:
its midpoint grid, edge sweep and white-box probe) on a kernel adapter whose every
accept() call is recorded, and writes each point -- case, index, phase, uniforms,
drafts, draft_lens, output tokens, zero-mass flag -- plus each case's evaluator figures
(zero-mass commits as `specconform.kinds.quadrature.evaluate` counts them, reason).

On the GPU machine (device tool, carry [".whl", ".peers-gpu/vllm.tar.xz"]):

    bash bench/peers_gpu.sh install vllm && export PYTHONPATH=/tmp/site:$PWD
    TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= python3 bench/vllm_kernel_points.py \\
        --device cpu --json $OUT/points-cpu.json
    python3 bench/vllm_kernel_points.py --device cuda --json $OUT/points-cuda.json
    python3 bench/vllm_kernel_points.py --compare $OUT/points-cpu.json $OUT/points-cuda.json

`--case NAME` runs one case; `--adapter module:factory` (or `bundled`) another kernel;
`--compare A B` exits 0 when every point's inputs and tokens agree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOL = "protocols/peers/vllm_kernel.yaml"
ADAPTER = "specconform.adapters.peers.vllm:accept_kernel"
SHOW = 20


class Steps:
    """The runner's progress bar: counts its advances (one per run of the case loop)."""

    def __init__(self) -> None:
        self.n = 0

    def advance(self, k: int = 1) -> None:
        self.n += k


class Recorder:
    """A kernel that passes every accept() call through and records its rows."""

    def __init__(self, kernel: Any, steps: Steps) -> None:
        self._k, self._steps = kernel, steps
        self.name: str = kernel.name
        self.probing = False
        self.calls: list[tuple[str | int, dict[str, np.ndarray]]] = []

    def accept(self, p: Any, q: Any, drafts: Any, draft_lens: Any, uniforms: Any) -> Any:
        out = self._k.accept(p, q, drafts, draft_lens, uniforms)
        step: str | int = "probe" if self.probing else self._steps.n
        rows = {"drafts": drafts, "lens": draft_lens, "u": uniforms, "tokens": out.tokens}
        self.calls.append((step, {k: np.array(v) for k, v in rows.items()}))
        return out


def _phase(step: str | int, drafts: list[int]) -> str:
    if isinstance(step, str):
        return step
    n = len(drafts)
    if step < 2 * n:
        return f"{'first' if step % 2 == 0 else 'bonus'}:x={drafts[step // 2]}"
    return "k0" if step == 2 * n else "edge"


def run_case(case: Any, kernel: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import specconform.runner.quadrature as rq
    from specconform.kinds.laws import quadrature_case_laws
    from specconform.kinds.quadrature.evaluate import _zero_mass_commits, evaluate_case

    steps = Steps()
    rec = Recorder(kernel, steps)
    probe = rq.ensure_uses_uniforms

    def recorded_probe(kernel: Any, p_rows: Any, q_rows: Any, drafts: Any, vocab: int) -> None:
        kernel.probing = True
        try:
            probe(kernel, p_rows, q_rows, drafts, vocab)
        finally:
            kernel.probing = False

    rq.ensure_uses_uniforms = recorded_probe
    try:
        raw = json.loads(json.dumps(rq._run_case(case, rec, steps)))
    finally:
        rq.ensure_uses_uniforms = probe
    p, _, p_bonus = quadrature_case_laws(case)
    laws = np.stack([p, p_bonus])  # the runner's p_rows: position 0, then the bonus
    points: list[dict[str, Any]] = []
    bad_points: dict[str, int] = {}  # zero-mass points by phase (first/bonus pooled)
    for step, c in rec.calls:
        for i in range(c["tokens"].shape[0]):
            toks = [int(t) for t in c["tokens"][i]]
            zero = toks[0] < 0 or any(
                t >= 0 and (t >= laws.shape[1] or laws[min(j, 1), t] <= 0)
                for j, t in enumerate(toks)
            )
            phase = _phase(step, raw["drafts"])
            if zero:
                kind = phase.split(":")[0]
                bad_points[kind] = bad_points.get(kind, 0) + 1
            points.append(
                {
                    "case": case.name,
                    "index": len(points),
                    "phase": phase,
                    "uniforms": [float(x) for x in c["u"][i]],
                    "drafts": [int(x) for x in c["drafts"][i]],
                    "draft_lens": int(c["lens"][i]),
                    "tokens": toks,
                    "zero_mass": bool(zero),
                }
            )
    row = evaluate_case(case.model_dump(mode="json"), raw)
    summary = {
        "zero_mass_commits": _zero_mass_commits(raw, p, p_bonus),
        "zero_mass_points": bad_points,  # e.g. {"edge": 36}: coin 0 at the edge sweep
        "passed": bool(row.passed),
        "reason": row.reason,
        "statistic": row.statistic,
        "points": len(points),
    }
    return points, summary


def collect(args: argparse.Namespace) -> int:
    from specconform.adapters.kernel import load_kernel
    from specconform.protocol.load import load_protocol

    protocol = load_protocol(args.protocol).model
    cases = [c for c in protocol.cases if args.case in (None, c.name)]
    if not cases:
        sys.exit(f"--case {args.case}: not a case of {args.protocol}")
    kernel = load_kernel(args.adapter, args.device, args.mutant)
    import torch

    env: dict[str, Any] = {
        "device": args.device,
        "adapter": args.adapter,
        "kernel": kernel.name,
        "mutant": args.mutant,
        "torch": torch.__version__,
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
    }
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    env["triton"] = getattr(sys.modules.get("triton"), "__version__", None)
    points: list[dict[str, Any]] = []
    summaries: dict[str, Any] = {}
    for case in cases:
        pts, summaries[case.name] = run_case(case, kernel)
        points.extend(pts)
    Path(args.json).write_text(json.dumps({"env": env, "cases": summaries, "points": points}))
    print(json.dumps(env))
    for name, s in summaries.items():
        print(f"{args.device}: {name}: {json.dumps(s)}")
    return 0


def compare(a_path: str, b_path: str) -> int:
    missing = [x for x in (a_path, b_path) if not Path(x).is_file()]
    if missing:
        print(f"compare: no such file: {', '.join(missing)}")
        return 2
    a, b = (json.loads(Path(x).read_text()) for x in (a_path, b_path))
    key = lambda pt: (pt["case"], pt["index"])  # noqa: E731
    pa, pb = {key(x): x for x in a["points"]}, {key(x): x for x in b["points"]}
    counts: dict[str, int] = {}
    shown = 0
    for k in sorted(pa.keys() | pb.keys()):
        x, y = pa.get(k), pb.get(k)
        if x is not None and y is not None and x == y:
            continue
        counts[k[0]] = counts.get(k[0], 0) + 1
        if shown < SHOW:
            shown += 1
            if x is None or y is None:
                print(f"{k}: only in {'B' if x is None else 'A'}")
                continue
            inputs = all(x[f] == y[f] for f in ("uniforms", "drafts", "draft_lens", "phase"))
            print(
                f"{k} {x['phase']} u={x['uniforms']} drafts={x['drafts']} "
                f"lens={x['draft_lens']}: A {x['tokens']} B {y['tokens']}"
                + ("" if inputs else f" (INPUTS DIFFER: B u={y['uniforms']} {y['drafts']})")
            )
    print(f"A: {json.dumps(a['env'])}\nB: {json.dumps(b['env'])}")
    for name in sorted(a["cases"].keys() | b["cases"].keys()):
        sa, sb = a["cases"].get(name, {}), b["cases"].get(name, {})
        print(
            f"{name}: differing points {counts.get(name, 0)}; zero-mass commits (evaluator) "
            f"A {sa.get('zero_mass_commits')} B {sb.get('zero_mass_commits')}; zero-mass "
            f"points A {sa.get('zero_mass_points')} B {sb.get('zero_mass_points')}; "
            f"reason A {sa.get('reason')!r} B {sb.get('reason')!r}"
        )
    total = sum(counts.values())
    n = len(pa.keys() | pb.keys())
    print(f"{'IDENTICAL' if total == 0 else 'DIFFERENT'}: {total} of {n} points differ")
    return 0 if total == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", default=PROTOCOL)
    ap.add_argument("--case", default=None, help="one case by name (default: all)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--adapter", default=ADAPTER, help="module:factory, or bundled")
    ap.add_argument("--mutant", default=None, help="a kernel mutant (bundled adapter)")
    ap.add_argument("--json", default=None, help="where the points go")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None)
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.json:
        ap.error("--json PATH is required (or --compare A B)")
    return collect(args)


if __name__ == "__main__":
    sys.exit(main())
