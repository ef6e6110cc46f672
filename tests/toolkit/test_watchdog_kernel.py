"""The adapter watchdog on a kernel protocol (issue 37 part 2): a sampler adapter whose
accept() never returns ends the run with exit 124 and one error line; a kernel run has
no checkpoint and no ledger, so nothing is left in --out.

Deterministic: the hang is infinite, the deadline 1 s. No statistics. Negative control:
the bundled kernel under the same --adapter-timeout is not stopped by it (the
quadrature protocol's small cases, each call milliseconds)."""

from __future__ import annotations

import time

import yaml

from tests.toolkit.cli_helpers import ROOT, run_cli


def _protocol(tmp_path, adapter: str):
    data = yaml.safe_load((ROOT / "protocols" / "quadrature.yaml").read_text())
    data.update(name="quadrature_watchdog", cases=[dict(c, grid=64) for c in data["cases"][:2]])
    data["sampler"] = {**data.get("sampler", {}), "adapter": adapter}
    path = tmp_path / "quadrature_watchdog.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_hung_sampler_ends_124_and_writes_nothing(tmp_path):
    path = _protocol(tmp_path, "tests.toolkit.test_watchdog_kernel:hanging")
    out = tmp_path / "out"
    hung = run_cli("run", path, "--no-sign", "--out", out, "--adapter-timeout", "1")
    assert hung.returncode == 124, hung.stderr[-2000:]
    lines = hung.stderr.splitlines()
    assert lines[-1].startswith("error: sampler.adapter tests.toolkit.test_watchdog_kernel")
    assert "accept() did not return within 1 s" in lines[-1] and "Traceback" not in hung.stderr
    assert not out.exists()


def test_negative_control_the_bundled_kernel_finishes_under_the_deadline(tmp_path):
    path = _protocol(tmp_path, "bundled")
    done = run_cli("run", path, "--no-sign", "--out", tmp_path / "out", "--adapter-timeout", "60")
    assert done.returncode == 0, done.stderr[-2000:]


class _Hanging:
    name = "hanging"

    def accept(self, p, q, drafts, draft_lens, uniforms):
        time.sleep(10**6)


def hanging(*, device, mutant):
    return _Hanging()
