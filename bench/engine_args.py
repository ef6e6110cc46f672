"""Command-line options shared by the engine benches (host_timeline.py, round_profile.py)."""

from __future__ import annotations

import argparse

import torch


def engine_parser(description: str, concurrency: str) -> argparse.ArgumentParser:
    """A parser with the options every engine bench takes: --preset, --device, --dtype,
    --concurrency (a comma-separated list; ``concurrency`` is the default) and --modes."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--concurrency", default=concurrency)
    ap.add_argument("--modes", default="nospec,async")
    return ap
