"""Trellis decoding drivers: the default model, plain (constrained) generation and
search over constrained continuations.

Example::

    import constrain, search
    lm = search.load_default_model()            # SmolLM2-135M-Instruct, CPU float32
    phone = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab)
    print(search.generate(lm, "Give me a phone number", constraint=phone))

Every autoregressive driver is ``driver(lm, prompt, *, constraint=None, ...)``:
``prompt`` is text (through ``lm.prompt_ids``: the chat template for chat models)
or token ids, and the results share the base :class:`search.SearchResult`.
The layers: :mod:`search.lm` (the model protocols and wrappers),
:mod:`search.autoregressive`, :mod:`search.reasoning`, :mod:`search.diffusion`
(drivers), :mod:`search.models` (the default model), :mod:`search.cli`.

``import search`` does not import torch or transformers; the model names are
imported lazily.
"""

from __future__ import annotations

import importlib
import warnings

from .autoregressive.sampling import GenerationResult, generate, generate_batch, stream
from .diffusion.dingo_dp import DingoResult, dingo
from .results import SearchResult

_LAZY = {
    "load_default_model": ("search.models.smollm2", "load_default_model"),
    "cache_dir": ("search.models.smollm2", "cache_dir"),
    "TransformersLM": ("search.lm.transformers", "TransformersLM"),
    "LM": ("search.lm.protocol", "LM"),
    "CallableLM": ("search.lm.protocol", "CallableLM"),
    "as_lm": ("search.lm.protocol", "as_lm"),
    "Hypothesis": ("search.autoregressive.beam", "Hypothesis"),
    "beam_search": ("search.autoregressive.beam", "beam_search"),
    "best_first_beam_search": ("search.autoregressive.beam", "best_first_beam_search"),
    "constrained_beam_search": ("search.autoregressive.constrained_beam", "constrained_beam_search"),
    "AWRS": ("search.autoregressive.awrs", "AWRS"),
    "AWRSStep": ("search.autoregressive.awrs", "AWRSStep"),
    "awrs_step": ("search.autoregressive.awrs", "awrs_step"),
    "smc": ("search.autoregressive.sequential_monte_carlo", "smc"),
    "SMCResult": ("search.autoregressive.sequential_monte_carlo", "SMCResult"),
    "SMCParticle": ("search.autoregressive.sequential_monte_carlo", "SMCParticle"),
    "Lattice": ("search.autoregressive.lattice", "Lattice"),
    "lattice_search": ("search.autoregressive.lattice", "lattice_search"),
    "diffusion_generate": ("search.diffusion.driver", "diffusion_generate"),
    "DiffusionResult": ("search.diffusion.driver", "DiffusionResult"),
    "MaskedDiffusionLM": ("search.lm.diffusion", "MaskedDiffusionLM"),
    "TransformersDiffusionLM": ("search.lm.diffusion", "TransformersDiffusionLM"),
    "can_complete": ("constrain.analysis", "can_complete"),
    "find_completion": ("constrain.analysis", "find_completion"),
    "can_complete_regex": ("constrain.analysis", "can_complete_regex"),
    "fim_allowed": ("constrain.analysis", "fim_allowed"),
    "Hole": ("constrain.analysis", "Hole"),
    "astar_search": ("search.reasoning.astar", "astar_search"),
    "foresight_search": ("search.reasoning.foresight", "foresight_search"),
    "best_of_n": ("search.reasoning.rerank", "best_of_n"),
    "adadec_generate": ("search.reasoning.adadec", "adadec_generate"),
    "fit_adadec_threshold": ("search.reasoning.adadec", "fit_adadec_threshold"),
    "AdaDecThresholds": ("search.reasoning.adadec", "AdaDecThresholds"),
    "adaptive_best_of_k": ("search.reasoning.adaptive_best_of_k", "adaptive_best_of_k"),
    "RewardPredictor": ("search.reasoning.adaptive_best_of_k", "RewardPredictor"),
    "allocate_samples": ("search.reasoning.adaptive_best_of_k", "allocate_samples"),
    "PRM": ("search.reasoning.prm", "PRM"),
    "HFStepPRM": ("search.reasoning.prm", "HFStepPRM"),
    "LMJudgePRM": ("search.reasoning.prm", "LMJudgePRM"),
    "CallablePRM": ("search.reasoning.prm", "CallablePRM"),
    "ArithmeticCheckerPRM": ("search.reasoning.prm", "ArithmeticCheckerPRM"),
    "check_arithmetic": ("search.reasoning.prm", "check_arithmetic"),
    "ReasoningResult": ("search.reasoning.steps", "ReasoningResult"),
    "Solution": ("search.reasoning.steps", "Solution"),
    "Step": ("search.reasoning.steps", "Step"),
    "Budget": ("search.reasoning.steps", "Budget"),
    "StepOptions": ("search.reasoning.steps", "StepOptions"),
    "LMStepSampler": ("search.reasoning.steps", "LMStepSampler"),
    "extract_answer": ("search.reasoning.steps", "extract_answer"),
}

#: test helpers once exported here; they live in search.testing.tiny_diffusion
_DEPRECATED = {
    "SyntheticDiffusionLM": ("search.testing.tiny_diffusion", "SyntheticDiffusionLM"),
    "tiny_json_model": ("search.testing.tiny_diffusion", "tiny_json_model"),
}

__all__ = sorted(set(_LAZY) | {"generate", "generate_batch", "stream", "GenerationResult", "dingo", "DingoResult", "SearchResult"})


def __getattr__(name: str):
    """Import the public names of this package on first use."""
    if name in _DEPRECATED:
        module, attr = _DEPRECATED[name]
        # not cached in the module: every use warns (once per call site)
        warnings.warn(f"search.{name} is a test helper and leaves the search namespace in the next "
                      f"release; import it from {module}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), attr)
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'search' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    """The module's names, the lazily imported ones included."""
    return sorted(set(globals()) | set(_LAZY))
