"""Runners execute a protocol against an adapter and produce raw data (they may import
torch); evaluation and evidence are elsewhere and torch-free."""
