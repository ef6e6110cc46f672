"""Run a tree protocol in-process (runner + evaluator, no CLI start-up) for the tree tests."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from specconform.kinds.registry import kind_of
from specconform.protocol.load import load_protocol
from specconform.results import RawData
from specconform.runner.tree import collect
from tests.toolkit.cli_helpers import ROOT


class _Bar:
    def advance(self, n: int = 1) -> None:
        pass


@contextlib.contextmanager
def _progress(name, total):
    yield _Bar()


def run_tree(name: str, *, mutant: str | None = None, edit=None):
    """(evaluation, raw) of protocols/<name>.yaml; `edit(model)` returns a changed model."""
    loaded = load_protocol(ROOT / "protocols" / f"{name}.yaml")
    if edit is not None:
        loaded = SimpleNamespace(model=edit(loaded.model), data=None)
    outputs = SimpleNamespace(add_run_fields=lambda **kw: None)
    files = collect(loaded, mutant=mutant, progress=_progress, log=lambda m: None,
                    context=SimpleNamespace(outputs=outputs))  # fmt: skip
    raw = RawData(files)
    return kind_of("tree").evaluate_protocol(loaded.model.model_dump(mode="json"), raw), raw
