"""The vLLM general plugin: makes ``"trellis"`` a structured-output backend.

vLLM's backend name is a closed set (a ``Literal`` in
``StructuredOutputsConfig``, an ``if``/``elif`` over names in the engine and
in the front end's request validation), with no registry a third party could
add to. :func:`register` — run by vLLM in every process through the
``vllm.general_plugins`` entry point — adapts exactly those three places, and
nothing else:

1. ``StructuredOutputsConfig.backend`` also accepts ``"trellis"``;
2. ``SamplingParams._validate_structured_outputs`` (the front end, when it
   admits a request) compiles a ``"trellis"`` request's constraint, so a
   malformed or unsupported one fails its own request with Trellis's message;
   other backends' requests go to vLLM's code unchanged;
3. ``StructuredOutputManager.grammar_init`` (the engine) makes the
   :class:`~constrain.engines.vllm.backend.TrellisBackend` when the engine
   first meets a ``"trellis"`` request, then leaves the rest to vLLM.

On the CPU build it also works around a scan of vLLM's worker start-up that
fails on a process that has imported numba (as Trellis has): see
:func:`_tolerate_llvmlite_in_kernel_scan`. It also records, on each request's validation, the engine's tokenizer for the
logits processor's own validation (:mod:`constrain.engines.vllm.sources`).
Each adaptation wraps vLLM's function and calls it for everything that is not
Trellis's; they are applied once per process, and only to the vLLM releases of
:mod:`constrain.engines.vllm.compat` (another release raises, naming them).

Offline, ``LLM(structured_outputs_config={"backend": "trellis"})`` checks its
configuration before vLLM loads plugins: call :func:`register` (or
``vllm.plugins.load_general_plugins()``) first.
"""

from __future__ import annotations

import functools
import sys
import threading
import typing

from constrain.engines.vllm.compat import check_version

#: marks a wrapped vLLM function, so that a second :func:`register` is a no-op
_MARK = "__trellis_wrapped__"
_lock = threading.Lock()


def register() -> None:
    """Make ``"trellis"`` a structured-output backend of this process's vLLM
    (idempotent). Raises :class:`~constrain.engines.vllm.compat.UnsupportedVLLMError`
    for a vLLM release this integration does not support."""
    check_version()
    with _lock:
        _widen_backend_name()
        _wrap_request_validation()
        _wrap_grammar_init()
        _tolerate_llvmlite_in_kernel_scan()


def _widen_backend_name() -> None:
    import pydantic
    from vllm.config.structured_outputs import StructuredOutputsConfig

    field = StructuredOutputsConfig.__dataclass_fields__["backend"]
    names = typing.get_args(field.type)
    if "trellis" in names:
        return
    widened = typing.Literal[names + ("trellis",)]
    field.type = widened
    StructuredOutputsConfig.__annotations__["backend"] = widened
    pydantic.dataclasses.rebuild_dataclass(StructuredOutputsConfig, force=True)


def _wrap_request_validation() -> None:
    from vllm.sampling_params import SamplingParams

    original_verify = SamplingParams.verify
    if not getattr(original_verify, _MARK, False):
        @functools.wraps(original_verify)
        def verify(self, model_config, speculative_config, structured_outputs_config,
                   tokenizer, *args, **kwargs):
            from constrain.engines.vllm.sources import set_front_end

            set_front_end(None if model_config.skip_tokenizer_init else tokenizer,
                          model_config.get_vocab_size(), speculative_config is not None)
            return original_verify(self, model_config, speculative_config,
                                   structured_outputs_config, tokenizer, *args, **kwargs)

        setattr(verify, _MARK, True)
        SamplingParams.verify = verify

    original = SamplingParams._validate_structured_outputs
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        if (structured_outputs_config is None or self.structured_outputs is None
                or structured_outputs_config.backend != "trellis"):
            return original(self, model_config, structured_outputs_config, tokenizer)
        _validate_trellis_request(self, model_config, tokenizer)

    setattr(_validate_structured_outputs, _MARK, True)
    SamplingParams._validate_structured_outputs = _validate_structured_outputs


def _validate_trellis_request(params, model_config, tokenizer) -> None:
    """The front end's check of a structured-output request for the trellis
    backend: vLLM's own checks that do not depend on the backend, then the
    compile (kept in the front end's cache)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import check_json_nesting
    from vllm.v1.structured_output.request import get_structured_output_key

    from constrain.engines.vllm.backend import spec_from_key
    from constrain.engines.vllm.sources import backend_json_whitespace, source_for
    from constrain.errors import ConstraintError

    so = params.structured_outputs
    if model_config.is_diffusion:
        raise VLLMValidationError("Structured outputs are not supported for diffusion language "
                                  "models.")
    if tokenizer is None:
        raise VLLMValidationError("Structured outputs requires a tokenizer so it can't be used "
                                  "with 'skip_tokenizer_init'")
    if so._backend and so._backend != "trellis":
        raise VLLMValidationError(
            f"Request-level structured output backend selection is not supported. The request "
            f"specified '{so._backend}', but vLLM was initialised with 'trellis'. This error can "
            f"be resolved by removing '_backend' from the request.")
    so._backend = "trellis"
    so._backend_was_auto = False
    check_json_nesting(so.json)
    # (as vLLM's own validation does: a tag 2,000 deep was a RecursionError)
    check_json_nesting(so.structural_tag, structural_tag=True)
    try:
        spec = spec_from_key(*get_structured_output_key(so), backend_json_whitespace())
        source_for(tokenizer, model_config.get_vocab_size(),
                   json_whitespace=backend_json_whitespace(), warm=True).compile(spec)
    except ConstraintError as exc:
        raise VLLMValidationError(f"trellis: {exc}") from exc
    so.__post_init__()


def _wrap_grammar_init() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.grammar_init
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def grammar_init(self, request):
        so_request = request.structured_output_request
        if (self.backend is None and so_request is not None
                and request.sampling_params.structured_outputs._backend == "trellis"):
            from constrain.engines.vllm.backend import TrellisBackend

            self.backend = TrellisBackend(self.vllm_config, tokenizer=self.tokenizer,
                                          vocab_size=self.vllm_config.model_config.get_vocab_size())
        return original(self, request)

    setattr(grammar_init, _MARK, True)
    StructuredOutputManager.grammar_init = grammar_init


def _tolerate_llvmlite_in_kernel_scan() -> None:
    """vLLM's CPU workers, at start-up, replace Triton kernels by C++ ones and
    rebind every module attribute that holds one, reading ``vars(value)`` of
    each attribute value of every module; llvmlite's ``ffi.lib`` (numba's, so
    loaded with Trellis, which this plugin is part of) answers ``__dict__``
    with a function wrapper, and the scan stops the worker with an
    ``AttributeError``. The scan looks for kernels only, so llvmlite's
    ``lib`` is kept out of its sight while it runs (start-up, one thread)."""
    from vllm.triton_utils import dispatcher

    original = dispatcher._rebind_kernels
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _rebind_kernels(overrides):
        ffi = sys.modules.get("llvmlite.binding.ffi")
        lib = ffi.__dict__.pop("lib", None) if ffi is not None else None
        try:
            return original(overrides)
        finally:
            if lib is not None:
                ffi.lib = lib

    setattr(_rebind_kernels, _MARK, True)
    dispatcher._rebind_kernels = _rebind_kernels


__all__ = ["register"]
