"""Kernel adapters (sampler.adapter): a broken factory or kernel is one line, exit 2, no
output; quadrature refuses a black-box sampler instead of reporting a misleading FAIL.

Deterministic: no statistics here (the probe compares two runs of the same rows exactly).
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from specconform.adapters.engine import AdapterError
from specconform.adapters.kernel import (
    BundledKernel,
    CheckedKernel,
    KernelOutput,
    ensure_uses_uniforms,
    load_kernel,
)
from tests.toolkit.cli_helpers import ROOT, run_cli

HERE = "tests.toolkit.test_adapters_kernel"


class _Kernel:
    """The bundled kernel with one defect (selected by `how`)."""

    name = "test-kernel"

    def __init__(self, how: str):
        self.how = how
        self._k = BundledKernel("cpu")
        self._rng = np.random.Generator(np.random.PCG64(7))

    def accept(self, p, q, drafts, draft_lens, uniforms):
        if self.how == "black_box":  # draws its own randomness, ignores the uniforms
            uniforms = self._rng.random(uniforms.shape)
        if self.how == "reseeding":  # ignores the uniforms, same draws every call
            uniforms = np.random.Generator(np.random.PCG64(0)).random(uniforms.shape)
        out = self._k.accept(p, q, drafts, draft_lens, uniforms)
        if self.how == "torch":
            import torch

            return KernelOutput(torch.as_tensor(out.tokens), out.num_accepted, out.error)
        if self.how == "shape":
            return KernelOutput(out.tokens[:, :1], out.num_accepted, out.error)
        if self.how == "raises":
            raise IndexError("index 7 is out of bounds")
        if self.how == "tuple":
            return (out.tokens, out.num_accepted, out.error)
        return out


class _Nameless:
    def accept(self, *args):
        raise AssertionError("never called")


def make(how):
    def factory(device, mutant):
        if how == "factory_raises":
            raise RuntimeError("no GPU context")
        if how == "nameless":
            return _Nameless()
        return _Kernel(how)

    return factory


for _how in (
    "black_box",
    "reseeding",
    "torch",
    "shape",
    "raises",
    "tuple",
    "factory_raises",
    "nameless",
    "clean",
):
    globals()[f"kernel_{_how}"] = make(_how)


def _laws():
    p = np.array([0.5, 0.3, 0.2, 0.0], np.float32)
    q = np.array([0.2, 0.2, 0.3, 0.3], np.float32)
    return np.stack([p, np.roll(p, 1)])[None], q[None, None], np.flatnonzero(q)


@pytest.mark.parametrize(
    "how, message",
    [
        ("torch", "returned tokens as Tensor, expected a numpy array (convert with"),
        ("shape", "returned tokens of shape (256, 1), expected (256, 2)"),
        ("raises", "raised IndexError: index 7 is out of bounds"),
        ("tuple", "returned tuple without `tokens`"),
        ("factory_raises", "factory raised RuntimeError: no GPU context"),
        ("nameless", "has no `name` string"),
    ],
)
def test_broken_kernels_are_one_named_line(how, message):
    with pytest.raises(AdapterError) as info:
        kernel = load_kernel(f"{HERE}:kernel_{how}", "cpu", None)
        p, q, drafts = _laws()
        ensure_uses_uniforms(kernel, p, q, drafts, 4)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert str(info.value).startswith(f"sampler.adapter {HERE}:kernel_{how}")


@pytest.mark.parametrize("how", ["black_box", "reseeding"])
def test_black_box_samplers_are_refused_for_quadrature(how):
    p, q, drafts = _laws()
    kernel = CheckedKernel(_Kernel(how), "test")
    with pytest.raises(AdapterError, match="does not follow the uniforms it is given"):
        ensure_uses_uniforms(kernel, p, q, drafts, 4)


def test_white_box_kernels_pass_the_probe():
    p, q, drafts = _laws()
    ensure_uses_uniforms(CheckedKernel(BundledKernel("cpu"), "bundled"), p, q, drafts, 4)
    ensure_uses_uniforms(load_kernel(f"{HERE}:kernel_clean", "cpu", None), p, q, drafts, 4)


def _quadrature(tmp_path, adapter: str):
    data = yaml.safe_load((ROOT / "protocols" / "quadrature.yaml").read_text())
    data["sampler"] = {"adapter": adapter}
    data["cases"] = data["cases"][:1]
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "how, message",
    [
        ("black_box", "black-box sampler"),
        ("torch", "expected a numpy array"),
        ("factory_raises", "factory raised RuntimeError"),
    ],
)
def test_quadrature_cli_exits_2_with_one_line_and_no_output(tmp_path, how, message):
    out = tmp_path / "out"
    proc = run_cli("run", _quadrature(tmp_path, f"{HERE}:kernel_{how}"), "--out", out, "--no-sign")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not out.exists()


def test_the_bundled_staged_call_is_the_accept_on_device_tensors():
    """bench/peer_accept_timing.py --kernel-only: the staged call (inputs on the device
    once, every row at the full draft length K) returns what accept() returns for those
    rows, left on the device."""
    rng = np.random.Generator(np.random.PCG64(7))
    B, K, V = 16, 3, 12
    p = rng.dirichlet(np.ones(V), size=(B, K + 1)).astype(np.float32)
    q = rng.dirichlet(np.ones(V), size=(B, K)).astype(np.float32)
    drafts = rng.integers(0, V, size=(B, K)).astype(np.int64)
    uniforms = rng.random((B, 2 * K + 1))
    kernel = BundledKernel("cpu")
    staged = kernel.staged(p, q, drafts, uniforms)()
    full = kernel.accept(p, q, drafts, np.full(B, K, np.int64), uniforms)
    assert np.array_equal(staged.tokens.numpy(), full.tokens)
    assert np.array_equal(staged.num_accepted.numpy(), full.num_accepted)
