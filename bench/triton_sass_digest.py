"""Refactoring check: the machine code of the fused sampling kernels, without a GPU.

Compiles ``triton_kernels._probs_kernel`` (fp32 and bf16 logits, the default
PROBS_CONFIG) for sm_90 with Triton's bundled LLVM and ptxas, disassembles the cubin
with its cuobjdump and prints a sha256 of the SASS and of the PTX (debug and location
lines dropped: they name source files and lines, which a move of code changes). Then
the SASS of each pass (ROW, CHUNKS, DRAW) of the categorical and accept kernels
(float32 laws, K = 3), without the lines that name the function, so the digest does not
change when a kernel is renamed. Two trees that print the same digests run the same
instructions, so a change that only moves kernel code can be checked on a machine
without a GPU:

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

import _checkout  # noqa: F401  (this checkout first on sys.path)


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


# Argument types of the categorical and accept kernels (float32 laws), and which of
# them each pass reads; the others are passed as None (triton_categorical.launch).
_TYPES = {
    **{"probs_ptr": "*fp32", "stride_p": "i64", "stride_u": "i64", "out_ptr": "*i64"},
    **{"p_ptr": "*fp32", "q_ptr": "*fp32", "d_ptr": "*i64", "lens_ptr": "*i64"},
    **{name: "i64" for name in ("sp0", "sp1", "sq0", "sq1", "sd0", "su0", "st0")},
    **{"u_ptr": "*fp64", "tok_ptr": "*i64", "nacc_ptr": "*i64", "ncom_ptr": "*i64"},
    **{"err_ptr": "*i1", "sums_ptr": "*fp64", "bads_ptr": "*i32", "lasts_ptr": "*i64"},
    **{"S": "i32", "V": "i32", "CH": "i32"},
}
_STATS = ("sums_ptr", "bads_ptr", "lasts_ptr", "S", "CH")
_CATEGORICAL_PASSES = {  # pass -> (arguments read, constexprs)
    "ROW": (("probs_ptr", "stride_p", "u_ptr", "stride_u", "out_ptr", "V"), ("BLOCK", "NTP")),
    "CHUNKS": (("probs_ptr", "stride_p", *_STATS, "V"), ("BLOCK",)),
    "DRAW": (
        ("probs_ptr", "stride_p", "u_ptr", "stride_u", "out_ptr", *_STATS, "V"),
        ("BLOCK", "SP"),
    ),
}
_INPUTS = ("p_ptr", "sp0", "sp1", "q_ptr", "sq0", "sq1", "d_ptr", "sd0", "lens_ptr", "u_ptr", "su0")
_OUTPUTS = ("tok_ptr", "st0", "nacc_ptr", "ncom_ptr", "err_ptr")
_ACCEPT_PASSES = {
    "ROW": ((*_INPUTS, *_OUTPUTS, "V"), ("K", "BLOCK", "NTP")),
    "CHUNKS": ((*_INPUTS, *_STATS, "V"), ("K", "BLOCK")),
    "DRAW": ((*_INPUTS, *_OUTPUTS, *_STATS, "V"), ("K", "BLOCK", "SP")),
}


def _sampling_kernel_digests(triton, ASTSource, GPUTarget, cuobjdump: Path) -> None:
    from engine_under_test.sampling import triton_accept, triton_categorical

    tc = triton_categorical
    for label, kernel, passes in (
        ("_categorical_kernel", tc._categorical_kernel, _CATEGORICAL_PASSES),
        ("_accept_kernel", triton_accept._accept_kernel, _ACCEPT_PASSES),
    ):
        for name, (reads, shape) in passes.items():
            split = name != "ROW"
            config = tc.SPLIT_CONFIG if split else tc.SAMPLING_CONFIG
            values = {"K": 3, "BLOCK": config["BLOCK"], "NTP": 16, "SP": 64}
            constexprs = {arg: None for arg in kernel.arg_names if arg not in reads}
            constexprs.update({arg: values[arg] for arg in shape}, PASS=getattr(tc, name).value)
            signature = {
                arg: "constexpr" if arg in constexprs else _TYPES[arg] for arg in kernel.arg_names
            }
            compiled = triton.compile(
                ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": config["num_warps"]},
            )
            sass = _sass(compiled.asm["cubin"], cuobjdump)
            body = "\n".join(line for line in sass.splitlines() if "Function" not in line)
            print(f"{label} {name.lower():6s} sass (name dropped) {_digest(body)}")


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
    _sampling_kernel_digests(triton, ASTSource, GPUTarget, cuobjdump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
