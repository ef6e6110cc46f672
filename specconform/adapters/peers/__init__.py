"""Sampler adapters for production speculative samplers ("peers"): vLLM, SGLang, FlashInfer.

One module per peer, each a set of kernel-adapter factories (``sampler.adapter:
specconform.adapters.peers.<peer>:<factory>``, called with ``device=`` and ``mutant=``;
see `specconform.adapters.kernel`). Every module imports its peer lazily, inside the
factory: a peer is never a dependency of specconform. Each pins the version it was tested
with (``TESTED_VERSION``); another installed version runs with a one-line warning naming
the tested one, and a missing peer is one line naming the install command (exit 2).

White-box factories pass the protocol's uniforms into the peer's own kernel (quadrature
applies as well as Monte Carlo); black-box ones let the peer draw its own randomness
(Monte Carlo only). docs/peers.md has the table of peers, versions and verdicts.

On CPU the peers' Triton kernels run in Triton's interpreter: `interpret_on_cpu` sets
``TRITON_INTERPRET=1`` (and hides GPUs) before the peer is imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys

import numpy as np

from specconform.util.errors import UsageError

# What `make peers-test` installs (docs/peers.md, Makefile); named in the missing-peer line.
INSTALL_HINT = "make peers-test (or see docs/peers.md: {spec} --no-deps into its own venv)"


def installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(dist: str, tested: str, install: str) -> str:
    """The installed version of `dist`; UsageError (exit 2, one line) when it is missing,
    a one-line warning on stderr when it is not the tested version."""
    version = installed_version(dist)
    if version is None:
        raise UsageError(f"{dist} is not installed: pip install {install}")
    if version != tested:
        print(
            f"warning: {dist} {version} is installed; specconform's {dist} adapter was "
            f"tested with {dist}=={tested}",
            file=sys.stderr,
        )
    return version


def interpret_on_cpu(device: str, modules: tuple[str, ...], env: dict | None = None) -> None:
    """On CPU, run Triton kernels in Triton's interpreter. Triton reads TRITON_INTERPRET
    when a kernel is decorated, so this must happen before the peer's kernels are
    imported; a peer imported earlier without it is refused (one line). `env`: the
    peer's own CPU switches (set unless already set)."""
    if device != "cpu":
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        loaded = [m for m in modules if m in sys.modules]
        if loaded:
            raise UsageError(
                f"{loaded[0]} was imported before TRITON_INTERPRET=1 was set: run on CPU "
                "with TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= in the environment"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    for key, value in (env or {}).items():
        os.environ.setdefault(key, value)


def check_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available on this machine")


class PeerImportError(UsageError):
    """The peer is installed (or partly) but its module cannot be imported on this host."""


# The first failure of each module's import, repeated on every later attempt: a failed
# import leaves half-initialised modules in sys.modules, and importing again then fails
# for another reason (vLLM 0.33 on torch 2.11: first "No module named
# 'vllm._C_stable_libtorch'", then "LayerName is already registered", a RuntimeError).
_IMPORT_FAILURES: dict[str, str] = {}


def import_module(name: str, dist: str, install: str):
    """The peer's module, or one PeerImportError line naming why it cannot be imported. Any
    exception at import counts (a peer's import-time code can raise RuntimeError or
    OSError, e.g. a compiled extension built for another torch)."""
    if name not in _IMPORT_FAILURES:
        try:
            return importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 -- any import-time failure, one line
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            _IMPORT_FAILURES[name] = f"{type(exc).__name__}: {reason}"
    raise PeerImportError(
        f"{dist}: cannot import {name} ({_IMPORT_FAILURES[name]}); "
        f"install with: pip install {install}"
    )


def inverse_cdf(law, u):
    """Token index of each row of `law` [N, V] (non-negative, any mass) at uniform `u` [N]:
    the first token whose float64 cumulative mass exceeds u * total; never a token of zero
    mass (the engine's `categorical` rule). Used where a white-box adapter must turn one
    of the protocol's uniforms into a token outside the peer's kernel."""
    law = np.asarray(law, np.float64)
    cdf = np.cumsum(law, axis=1)
    target = np.asarray(u, np.float64) * cdf[:, -1]
    idx = (cdf > target[:, None]).argmax(axis=1)
    # Rounding can leave idx on a zero-mass token only at the top: step back to the last
    # positive one.
    positive = law > 0
    last = law.shape[1] - 1 - np.argmax(positive[:, ::-1], axis=1)
    bad = ~positive[np.arange(law.shape[0]), idx]
    idx[bad] = last[bad]
    return idx.astype(np.int64)


def row_seeds(uniforms, salt: int) -> int:
    """A black-box adapter's base seed: a digest of the protocol's uniforms for its first
    call (so a run is reproducible and another --offset gives other randomness), never
    per row (a row's randomness does not follow its own uniforms)."""
    import hashlib

    digest = hashlib.sha256(np.ascontiguousarray(uniforms, np.float64).tobytes()).digest()
    return (int.from_bytes(digest[:8], "little") ^ salt) & ((1 << 63) - 1)
