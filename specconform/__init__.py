"""specconform: pre-registered conformance evidence for speculative sampling."""
__version__ = "0.1.0"
