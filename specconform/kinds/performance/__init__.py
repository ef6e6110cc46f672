"""The performance kind: the no-regression A/B (ABBA order over processes, a frozen
tolerance criterion on committed tokens/s, TPOT and peak memory reported, profiler
attribution per phase). Benchmarks, never timed assertions in tests."""

from specconform.protocol.schema_performance import PerformanceProtocol as Schema

from .evaluate import RAW_FILE, abba_order, evaluate, summarize

__all__ = ["RAW_FILE", "Schema", "abba_order", "evaluate", "summarize"]
