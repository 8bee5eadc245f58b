"""The ``trellis`` command."""

from .app import build_parser, main

__all__ = ["main", "build_parser"]
