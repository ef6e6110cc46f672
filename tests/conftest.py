"""Shared pytest configuration: GPU tests skip cleanly on machines without CUDA."""

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # verify/report environments may lack torch entirely
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
