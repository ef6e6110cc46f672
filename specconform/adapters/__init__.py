"""Adapters: how specconform drives an engine or a sampler.

A *kernel adapter* (kernel protocols: quadrature, montecarlo) wraps one accept function,
white-box: the caller passes the uniforms, so quadrature over them applies.

    accept(p,           # [B, K+1, V] float32 target law per position
           q,           # [B, K, V] float32 draft law per position
           drafts,      # [B, K] int64
           draft_lens,  # [B] int64 in [0, K]
           uniforms)    # [B, 2K+1] float64: coins, correction draws, bonus draw
        -> KernelOutput(tokens [B, K+1] int64 (-1 padded), num_accepted [B] int64,
                        error [B] bool)      # numpy arrays

An *engine adapter* (distribution protocols) runs groups of seeds and gives the serial
reference laws; see `specconform.adapters.engine`.

Only adapters and runners import torch; statistics, evidence, verify and report never do.
"""
