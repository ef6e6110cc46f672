"""specconform: pre-registered conformance evidence for speculative sampling.

The public API (docs/api.md)::

    import specconform
    result = specconform.run("protocols/quadrature.yaml", sign=False)   # needs [engine]
    specconform.verify(result.archive, skip_signature=True)
    view = specconform.load_archive(result.archive)
    specconform.pearson_gof([48, 52], [0.5, 0.5]).pvalue

Names resolve lazily (PEP 562): ``import specconform`` imports no numpy, scipy, torch or
engine, so the command line starts fast and works without optional extras.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public names once more, after specconform.api.__all__, on purpose: this module
# resolves them lazily and so cannot import specconform.api to read its list (the
# assert below and tests/toolkit/test_api.py keep the lists in step).
__all__ = [
    "AggregateResult",
    "ArchiveView",
    "BonferroniResult",
    "EvidenceError",
    "GofResult",
    "HomogeneityResult",
    "MissingExtraError",
    "ProtocolError",
    "RateResult",
    "Run",
    "SpecconformError",
    "TestRow",
    "UsageError",
    "Verdict",
    "VerifyReport",
    "__version__",
    "bonferroni",
    "detectable_tv",
    "joint_cells",
    "load_archive",
    "load_archives",
    "pearson_gof",
    "plan_protocol",
    "pearson_homogeneity",
    "rate_test",
    "run",
    "sum_chi2",
    "total_variation",
    "verify",
]

# public name -> module that defines it
_LAZY = {
    **{
        name: "specconform.api"
        for name in (
            "Run",
            "run",
            "verify",
            "load_archive",
            "load_archives",
            "plan_protocol",
            "ArchiveView",
            "VerifyReport",
            "TestRow",
            "Verdict",
        )
    },
    **{
        name: "specconform.util.errors"
        for name in ("SpecconformError", "UsageError", "ProtocolError", "EvidenceError")
    },
    "MissingExtraError": "specconform.util.extras",
    **{
        name: "specconform.api.stats"
        for name in (
            "pearson_gof",
            "pearson_homogeneity",
            "rate_test",
            "sum_chi2",
            "bonferroni",
            "total_variation",
            "joint_cells",
            "detectable_tv",
            "GofResult",
            "HomogeneityResult",
            "RateResult",
            "AggregateResult",
            "BonferroniResult",
        )
    },
}
assert sorted(_LAZY) == sorted(n for n in __all__ if n != "__version__")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specconform' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from specconform.api import (
        ArchiveView,
        Run,
        TestRow,
        Verdict,
        VerifyReport,
        load_archive,
        load_archives,
        run,
        verify,
    )
    from specconform.api.stats import (
        AggregateResult,
        BonferroniResult,
        GofResult,
        HomogeneityResult,
        RateResult,
        bonferroni,
        detectable_tv,
        joint_cells,
        pearson_gof,
        pearson_homogeneity,
        rate_test,
        sum_chi2,
        total_variation,
    )
    from specconform.util.errors import EvidenceError, ProtocolError, SpecconformError, UsageError
    from specconform.util.extras import MissingExtraError
