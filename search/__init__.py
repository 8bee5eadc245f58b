"""Trellis decoding drivers: the default model, plain (constrained) generation and,
later, search over constrained continuations.

Example::

    import constrain, search
    lm = search.load_default_model()            # SmolLM2-135M-Instruct, CPU float32
    phone = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab)
    print(search.generate(lm, "Give me a phone number", phone))

``import search`` does not import torch or transformers; the model names are
imported lazily.
"""

from __future__ import annotations

import importlib

# Imported eagerly (it is light) so that the function ``search.generate`` always
# shadows the submodule of the same name.
from .generate import GenerationResult, generate  # noqa: E402
from .dingo import DingoResult, dingo  # noqa: E402  (the function shadows the submodule)

_LAZY = {
    "load_default_model": ("search.smollm2", "load_default_model"),
    "cache_dir": ("search.smollm2", "cache_dir"),
    "TransformersLM": ("search.models", "TransformersLM"),
    "LM": ("search.lm", "LM"),
    "CallableLM": ("search.lm", "CallableLM"),
    "as_lm": ("search.lm", "as_lm"),
    "Hypothesis": ("search.beam", "Hypothesis"),
    "beam_search": ("search.beam", "beam_search"),
    "best_first_beam_search": ("search.beam", "best_first_beam_search"),
    "AWRS": ("search.awrs", "AWRS"),
    "AWRSStep": ("search.awrs", "AWRSStep"),
    "awrs_step": ("search.awrs", "awrs_step"),
    "smc": ("search.smc", "smc"),
    "SMCResult": ("search.smc", "SMCResult"),
    "SMCParticle": ("search.smc", "SMCParticle"),
    "Lattice": ("search.lattice", "Lattice"),
    "lattice_search": ("search.lattice", "lattice_search"),
    "diffusion_generate": ("search.diffusion", "diffusion_generate"),
    "DiffusionResult": ("search.diffusion", "DiffusionResult"),
    "MaskedDiffusionLM": ("search.diffusion", "MaskedDiffusionLM"),
    "TransformersDiffusionLM": ("search.diffusion", "TransformersDiffusionLM"),
    "SyntheticDiffusionLM": ("search.tiny_diffusion", "SyntheticDiffusionLM"),
    "tiny_json_model": ("search.tiny_diffusion", "tiny_json_model"),
    "can_complete": ("search.infill", "can_complete"),
    "find_completion": ("search.infill", "find_completion"),
    "can_complete_regex": ("search.infill", "can_complete_regex"),
    "fim_allowed": ("search.infill", "fim_allowed"),
    "Hole": ("search.infill", "Hole"),
    "astar_search": ("search.astar", "astar_search"),
    "foresight_search": ("search.foresight", "foresight_search"),
    "best_of_n": ("search.best_of_n", "best_of_n"),
    "PRM": ("search.prm", "PRM"),
    "HFStepPRM": ("search.prm", "HFStepPRM"),
    "LMJudgePRM": ("search.prm", "LMJudgePRM"),
    "CallablePRM": ("search.prm", "CallablePRM"),
    "ArithmeticCheckerPRM": ("search.prm", "ArithmeticCheckerPRM"),
    "check_arithmetic": ("search.prm", "check_arithmetic"),
    "ReasoningResult": ("search.reasoning_steps", "ReasoningResult"),
    "Solution": ("search.reasoning_steps", "Solution"),
    "Step": ("search.reasoning_steps", "Step"),
    "Budget": ("search.reasoning_steps", "Budget"),
    "LMStepSampler": ("search.reasoning_steps", "LMStepSampler"),
    "extract_answer": ("search.reasoning_steps", "extract_answer"),
}

__all__ = sorted(set(_LAZY) | {"generate", "GenerationResult", "dingo", "DingoResult"})


def __getattr__(name: str):
    """Import the public names of this package on first use."""
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
