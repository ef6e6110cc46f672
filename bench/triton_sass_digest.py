"""Refactoring check: the machine code of the fused probabilities kernel, without a GPU.

Compiles ``triton_kernels._probs_kernel`` (fp32 and bf16 logits, the default
PROBS_CONFIG) for sm_90 with Triton's bundled LLVM and ptxas, disassembles the cubin
with its cuobjdump and prints a sha256 of the SASS and of the PTX (debug and location
lines dropped: they name source files and lines, which a move of code changes). Two
trees that print the same digests run the same instructions, so a change that only
moves kernel code can be checked on a machine without a GPU:

    pip install --no-deps --target /tmp/tri triton==3.6.0
    PYTHONPATH=/tmp/tri .venv/bin/python bench/triton_sass_digest.py      # this tree
    git stash; PYTHONPATH=/tmp/tri .venv/bin/python bench/triton_sass_digest.py; git stash pop

Exit 0 with one line per dtype and stage; exit 2 when Triton is not importable.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ptx_body(ptx: str) -> str:
    keep = [
        line
        for line in ptx.split(".section\t.debug")[0].splitlines()
        if not line.strip().startswith((".loc", ".file", "//"))
    ]
    return "\n".join(keep)


def _sass(cubin: bytes, cuobjdump: Path) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run(
            [str(cuobjdump), "-sass", f.name], capture_output=True, text=True, check=True
        ).stdout
    # Instruction lines carry "/*addr*/ OPCODE ... ; /* encoding */"; headers name files.
    return "\n".join(line for line in out.splitlines() if "/*" in line or "Function" in line)


def main() -> int:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        print(f"error: triton is not importable ({exc}); see the module docstring", file=sys.stderr)
        return 2
    from engine_under_test.sampling import triton_kernels as tk

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    cfg = tk.PROBS_CONFIG
    constexprs = {
        "BLOCK": cfg["BLOCK"],
        "GROUPS": min(cfg["GROUPS"], cfg["BLOCK"]),
        "CAP": cfg["CAP"],
        "SB": cfg["SEARCH_BLOCK"],
        "NT": cfg["THRESHOLDS"],
        "PREFETCH": bool(cfg["PREFETCH"]),
    }
    for logits in ("*fp32", "*bf16"):
        signature = {
            "logits_ptr": logits,
            "stride_l": "i64",
            "out_ptr": "*fp32",
            "stride_o": "i64",
            "t_ptr": "*fp32",
            "k_ptr": "*i64",
            "p_ptr": "*fp32",
            "vbuf_ptr": "*fp32",
            "ibuf_ptr": "*i32",
            "cbuf_ptr": "*i32",
            "V": "i32",
            **{name: "constexpr" for name in constexprs},
        }
        options = {"num_warps": cfg["num_warps"]}
        if cfg.get("maxnreg"):
            options["maxnreg"] = cfg["maxnreg"]
        kernel = triton.compile(
            ASTSource(fn=tk._probs_kernel, signature=signature, constexprs=constexprs),
            target=GPUTarget("cuda", 90, 32),
            options=options,
        )
        print(f"_probs_kernel {logits[1:]} ptx  {_digest(_ptx_body(kernel.asm['ptx']))}")
        print(f"_probs_kernel {logits[1:]} sass {_digest(_sass(kernel.asm['cubin'], cuobjdump))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
