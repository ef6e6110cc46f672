"""Verification of evidence archives: digests, signature, external files, and every test
and the verdict recomputed from the archive's protocol and raw data.

It sits above the kinds layer (recomputing a verdict runs the kind's evaluator,
``specconform.kinds.reevaluate``) and below the CLI, the API and the report, which
call :func:`verify_archive`. Reading, sealing and signing archives is the ``evidence``
package below the kinds: it never evaluates. Imports no torch and no engine.
"""

from specconform.verification.verify import (
    VerifyReport,
    require_signature_choice,
    verify_archive,
)

__all__ = ["VerifyReport", "require_signature_choice", "verify_archive"]
