"""What a sequence protocol's law-comparison tolerances rest on, measured on its engine.

The deterministic checks of a sequence protocol (``teacher_forcing``, ``trace``,
``oracle``) compare two computations of the same law and call a difference in support,
or a max |Δp| above the test's tolerance, a mismatch. Those tolerances must sit above
the numerics of a correct engine on the device the protocol names (two float32 forwards
of different lengths, a batched kernel against the serial row loop) and far below what
a bug does (a bf16-rounded q: ~1e-3). This script measures the correct engine's side:
it runs the protocol's own runner on a shrunken copy of the protocol (``--requests``
per group, ``--max-tokens`` per request, every comparison's tolerance lifted to 1 so
that nothing falls back and every difference is recorded) and prints, per check, the
comparisons made, the support differences and the largest |Δp| against the tolerance
the shipped file states, and exits 1 when a check differs in support or exceeds its
stated tolerance. It changes nothing; a tolerance is changed in the protocol
file, before its first run, from these numbers.

Usage (the device tool, repository root; about 2 minutes for sequence.yaml on an H200,
the traced request of its one traced group included):
    python3 bench/sequence_tolerances.py protocols/sequence.yaml --requests 4
    python3 bench/sequence_tolerances.py protocols/ci_sequence.yaml --device cpu
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401  (this checkout first on sys.path)
import yaml

from specconform.kinds.sequence.numerics import check_tolerance
from specconform.kinds.sequence.raw import CHECKS
from specconform.protocol.load import load_protocol
from specconform.runner import sequence as runner
from specconform.runner.context import RunContext
from specconform.util.progress import progress

COMPARED = ("teacher_forcing", "trace", "oracle")  # the checks that compare two laws


def shrunken(data: dict, requests: int, max_tokens: int | None, device: str | None) -> dict:
    """The protocol with fewer and shorter requests and no tolerance in the way."""
    data = json.loads(json.dumps(data))
    data["seeds"]["count"] = requests
    if device:
        data["engine"]["device"] = device
    if max_tokens:
        data["engine"]["max_tokens"] = max_tokens
        for group in data["groups"]:
            if group.get("max_tokens"):
                group["max_tokens"] = [min(int(m), max_tokens) for m in group["max_tokens"]]
    for test in data["tests"]:
        if test["type"] in COMPARED:
            test["tolerance"] = 1.0
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("protocol", type=Path)
    ap.add_argument("--requests", type=int, default=4, help="requests per group (default 4)")
    ap.add_argument("--max-tokens", type=int, default=None, help="cap on each request's length")
    ap.add_argument("--device", default=None, help="override the protocol's device")
    args = ap.parse_args(argv)
    if args.requests < 1:
        ap.error("--requests must be at least 1")

    shipped = yaml.safe_load(args.protocol.read_text())
    # tolerance: model resolves to the law bound of the protocol's numerics block
    canonical = load_protocol(args.protocol).data
    stated = {
        t["name"]: check_tolerance(canonical, t)
        for t in canonical["tests"]
        if t["type"] in COMPARED
    }
    data = shrunken(shipped, args.requests, args.max_tokens, args.device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / args.protocol.name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        loaded = load_protocol(path)
        t0 = time.perf_counter()
        raw = runner.collect(
            loaded,
            mutant=None,
            progress=progress,
            log=lambda line: None,
            context=RunContext.standalone(),
        )
    seconds = time.perf_counter() - t0
    checks = json.loads(raw[CHECKS])
    print(
        f"{args.protocol} on {data['engine']['device']}, {args.requests} requests per "
        f"group, {seconds:.0f} s:"
    )
    print("| check | type | comparisons | support differences | max abs dp | stated tolerance |")
    print("|---|---|---|---|---|---|")
    exceeded = []
    for name, c in sorted(checks.items()):
        if c["type"] not in COMPARED or not c["applicable"]:
            continue
        worst = "-" if c["max_abs_diff"] is None else f"{c['max_abs_diff']:.3g}"
        # Tolerance 1 lifted every |dp| mismatch: what is left are support differences.
        print(
            f"| {name} | {c['type']} | {c['checked']} | {c['mismatches']} | {worst} "
            f"| {stated.get(name)} |"
        )
        tolerance = stated.get(name)
        too_far = (
            c["max_abs_diff"] is not None
            and tolerance is not None
            and (c["max_abs_diff"] > tolerance)
        )
        if c["mismatches"] or too_far:
            exceeded.append(name)
    if exceeded:
        # Exit 1 so that a GPU session can skip the full run, which would fall back to
        # the slow serial replay (teacher forcing) or fail its conformance checks.
        print(f"exceeds the stated tolerance or differs in support: {', '.join(exceeded)}")
        return 1
    print("every comparison is within its stated tolerance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
