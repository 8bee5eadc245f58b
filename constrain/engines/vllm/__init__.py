"""Trellis inside vLLM (the releases of :mod:`constrain.engines.vllm.compat`),
through both of its extension points:

* the official route, a V1 custom logits processor
  (:mod:`constrain.engines.vllm.logits_processor`), loaded by every engine
  through the ``vllm.logits_processors`` entry point; a request asks for it with
  ``SamplingParams(extra_args={"trellis": {...}})`` or ``vllm_xargs``;
* the backend route, a structured-output backend
  (:mod:`constrain.engines.vllm.backend`), selected with
  ``structured_outputs_config={"backend": "trellis"}`` once the plugin
  (:mod:`constrain.engines.vllm.plugin`, the ``vllm.general_plugins`` entry
  point) has run; vLLM's own structured-output requests then run on Trellis.

Request specs and the compiled-constraint cache both routes share (with the
other engines) are in
:mod:`constrain.engines.requests`; ``python -m constrain.engines.vllm.launcher``
is the ``vllm`` command for the CPU build. Importing this package imports
nothing of vLLM; see docs/serving.md.
"""

from constrain.engines.requests import (
    CACHE_BYTES_ENV,
    EXTRA_ARGS_KEY,
    LIMITS_ENV,
    Spec,
    SpecError,
    parse_spec,
)


def register() -> None:
    """Make ``"trellis"`` a structured-output backend of this process's vLLM
    (see :func:`constrain.engines.vllm.plugin.register`)."""
    from constrain.engines.vllm.plugin import register as _register

    _register()


def configure(limits=None, cache_bytes: int | None = None,
              json_whitespace: str | None = None) -> None:
    """Set the budgets and the backend route's JSON style of the engines this
    process starts from now on, front end and engine processes alike (through
    the environment they inherit: ``$TRELLIS_LIMITS``, ``$TRELLIS_CACHE_BYTES``,
    ``$TRELLIS_VLLM_JSON_WHITESPACE``; these take precedence over the first
    names ``$TRELLIS_VLLM_LIMITS`` and ``$TRELLIS_VLLM_CACHE_BYTES``).

    Args:
        limits: a :class:`constrain.Limits` (every compile's budgets).
        cache_bytes: the compiler's caches, in all.
        json_whitespace: ``"compact"`` or ``"flexible"`` (the backend route's
            default; the logits processor's default is compact).
    """
    import dataclasses
    import json
    import os

    from constrain.engines.vllm.sources import JSON_WHITESPACE_ENV
    from constrain.errors import ConstraintError
    from constrain.limits import Limits

    if limits is not None:
        if not isinstance(limits, Limits):
            raise ConstraintError(f"limits must be a constrain.Limits, not {type(limits).__name__}")
        os.environ[LIMITS_ENV] = json.dumps(dataclasses.asdict(limits))
    if cache_bytes is not None:
        from constrain.cache import check_budget

        os.environ[CACHE_BYTES_ENV] = str(check_budget("cache_bytes", cache_bytes))
    if json_whitespace is not None:
        if json_whitespace not in ("compact", "flexible"):
            raise ConstraintError(f"json_whitespace must be 'compact' or 'flexible', "
                                  f"not {json_whitespace!r}")
        os.environ[JSON_WHITESPACE_ENV] = json_whitespace


__all__ = ["register", "configure", "EXTRA_ARGS_KEY", "LIMITS_ENV", "CACHE_BYTES_ENV", "Spec",
           "SpecError", "parse_spec"]
