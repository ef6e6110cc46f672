"""Errors and the documented exit codes.

Every error the CLI reports is one of these; `specconform.cli` prints its message as one
line on stderr and exits with its `exit_code`:

    0  protocol passed (or, for `verify`, evidence valid)
    1  protocol failed
    2  bad input or usage (malformed protocol, bad option, overlapping seeds, ...)
    3  evidence invalid (digest, signature or recomputed verdict mismatch)
    4  a sharded run (--nproc) ended without a verdict: a process died
    7  protocol inconclusive: no deciding test failed, but one had no evidence (too few
       seeds); `gate` exits 7 too unless told to accept it (--inconclusive-ok or the
       protocol's `verdict.inconclusive: pass`). Not 5 or 6: pytest exits 0-6 (5 no
       tests collected, 6 max warnings), and a CI step that runs both must tell them apart.
  124  an engine adapter call passed its deadline (engine.call_timeout_s,
       --adapter-timeout; 124 as timeout(1)); a distribution run keeps its checkpoint
  130  interrupted (Ctrl-C, SIGINT); a distribution run keeps its checkpoint folder
"""

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_EVIDENCE = 3
EXIT_INCOMPLETE = 4
EXIT_INCONCLUSIVE = 7
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130


class SpecconformError(Exception):
    exit_code = EXIT_USAGE


class UsageError(SpecconformError):
    exit_code = EXIT_USAGE


class ProtocolError(UsageError):
    """A protocol file that fails validation: the message names file, field, problem."""


class EvidenceError(SpecconformError):
    exit_code = EXIT_EVIDENCE


class AdapterTimeout(SpecconformError):
    """An adapter call that did not return within its deadline (`adapters.watchdog`):
    the run ends as if interrupted -- checkpoint and its seed reservation kept for
    --resume -- not as bad input (which would undo them)."""

    exit_code = EXIT_TIMEOUT
