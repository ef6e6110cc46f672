"""Decoding runners: nospec, sync block speculation, async block speculation.

Shared pieces: ``state`` (slot/batch state, host transfer), ``base`` (host bookkeeping
and fatal cleanup), ``prefill``, ``spec_round`` (one speculative round), ``mutant_hooks``
(planted engine bugs), ``cuda_graphs`` (capture/replay helper), ``outputs``.
"""
