"""Which extra to install: the one-line error a command gives when an optional layer is
missing.

`pip install specconform` is the toolkit alone (verify, report in Markdown, keygen, the
statistics); `run`, `gate`, `mutants` need the bundled engine (torch), `report --format
html` needs matplotlib. A missing layer must not surface as a traceback from deep inside
an import, so every entry point that needs one calls `require(...)` first (or wraps the
import with `missing_extra`), which raises a `MissingExtraError` (exit 2, like any bad
input) naming the extra.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from specconform.util.errors import UsageError

# extra -> (the modules it provides, what it is for): the order of modules is the order
# they are checked, so the message names the first one missing.
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "engine": (("torch", "safetensors"), "running protocols on the bundled engine"),
    "hf": (("transformers", "gguf"), "Hugging Face and GGUF checkpoints"),
    "plots": (("matplotlib",), "the HTML report's plots"),
}

# A top-level module name -> its extra, for ImportErrors raised from inside an import.
_MODULE_EXTRA = {module: extra for extra, (modules, _) in EXTRAS.items() for module in modules}
_MODULE_EXTRA["engine_under_test"] = "engine"
_MODULE_EXTRA["triton"] = "cuda"


class MissingExtraError(UsageError):
    """An optional dependency is not installed; the message says which extra has it."""

    def __init__(self, extra: str, module: str, purpose: str):
        self.extra, self.module = extra, module
        super().__init__(
            f"{purpose} needs {module!r}, which is not installed: "
            f"pip install 'specconform[{extra}]'"
        )


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (empty when it is installed)."""
    modules, _ = EXTRAS[extra]
    return [m for m in modules if not _importable(m)]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refused it, or a broken __spec__
        return False


def require(extra: str, purpose: str | None = None) -> None:
    """Raise MissingExtraError unless every module of `extra` is importable."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, missing[0], purpose or EXTRAS[extra][1])


@contextmanager
def missing_extra(purpose: str) -> Iterator[None]:
    """Turn an ImportError of an optional module raised inside the block into the one-line
    MissingExtraError; other ImportErrors (a broken install) propagate unchanged."""
    try:
        yield
    except ImportError as exc:
        top = (exc.name or "").split(".")[0]
        extra = _MODULE_EXTRA.get(top)
        if extra is None:
            raise
        raise MissingExtraError(extra, top, purpose) from None
