"""The backend route: Trellis as a vLLM structured-output backend.

:class:`TrellisBackend` and :class:`TrellisGrammar` implement vLLM's
``StructuredOutputBackend`` and ``StructuredOutputGrammar``, so that vLLM's own
structured-output requests (``SamplingParams(structured_outputs=...)``, the
server's ``response_format``, ``structured_outputs`` and tool calls), its
speculative decoding (drafts validated, accepted and rolled back) and its
reasoning parser (masks only after the reasoning ends) run on Trellis. vLLM
selects it with ``structured_outputs_config={"backend": "trellis"}`` once the
plugin (:mod:`constrain.engines.vllm.plugin`) is loaded.

What each request type compiles to: ``JSON`` a JSON Schema, ``JSON_OBJECT`` any
JSON object, ``REGEX`` a Python ``re`` full match, ``GRAMMAR`` a Lark or GBNF
grammar (told apart by ``name ::=`` rule heads), ``CHOICE`` exactly one of the
strings, ``STRUCTURAL_TAG`` a structural tag (:func:`constrain.compile_structural_tag`:
the ``format`` form and the older ``structures``/``triggers`` one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from constrain.engines.vllm.compat import check_version

check_version()

import torch  # noqa: E402
from vllm.logger import init_logger  # noqa: E402
from vllm.v1.structured_output.backend_types import (  # noqa: E402
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from constrain.engines.vllm import sources  # noqa: E402
from constrain.engines.requests import Spec, SpecError, parse_spec  # noqa: E402
from constrain.protocol import Constraint  # noqa: E402
from constrain.runtime.bitmask import allocate_bitmask  # noqa: E402
from constrain.runtime.matcher import Matcher  # noqa: E402

logger = init_logger(__name__)

#: the name vLLM's configuration and requests use for this backend
BACKEND_NAME = "trellis"


def spec_from_key(request_type: StructuredOutputOptions, grammar_spec: str,
                  json_whitespace: str) -> Spec:
    """The Trellis spec of one of vLLM's structured-output keys (request type
    and text); :class:`SpecError` for a type Trellis does not take."""
    if request_type == StructuredOutputOptions.JSON:
        return parse_spec({"json_schema": grammar_spec, "whitespace": json_whitespace})
    if request_type == StructuredOutputOptions.JSON_OBJECT:
        return parse_spec({"json_object": True, "whitespace": json_whitespace})
    if request_type == StructuredOutputOptions.REGEX:
        return parse_spec({"regex": grammar_spec})
    if request_type == StructuredOutputOptions.GRAMMAR:
        return parse_spec({"grammar": grammar_spec})
    if request_type == StructuredOutputOptions.CHOICE:
        try:
            choices = json.loads(grammar_spec)
        except json.JSONDecodeError:
            raise SpecError(f"choice must be a list of strings, not {grammar_spec!r}") from None
        return parse_spec({"choice": choices})
    if request_type == StructuredOutputOptions.STRUCTURAL_TAG:
        return parse_spec({"structural_tag": grammar_spec, "whitespace": json_whitespace})
    raise SpecError(f"the trellis backend does not support {request_type.name} requests yet "
                    f"(supported: JSON, JSON_OBJECT, REGEX, GRAMMAR, CHOICE, STRUCTURAL_TAG)")


@dataclass
class TrellisBackend(StructuredOutputBackend):
    """The engine-level backend: one vocabulary and compiler for the model
    (made, with Trellis's kernels loaded, when the engine first needs the
    backend), a cache of compiled constraints, and a matcher per request."""

    def __post_init__(self):
        so_config = getattr(self.vllm_config, "structured_outputs_config", None)
        self.json_whitespace = sources.backend_json_whitespace(
            bool(getattr(so_config, "disable_any_whitespace", False)))
        self.source = sources.source_for(self.tokenizer, self.vocab_size,
                                         json_whitespace=self.json_whitespace, warm=True)
        spec_config = self.vllm_config.speculative_config
        self.num_speculative_tokens = (spec_config.num_speculative_tokens
                                       if spec_config is not None else 0)

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> "TrellisGrammar":
        """Compile (or fetch from the cache) one request's constraint; its
        errors name the place, and fail only that request."""
        spec = spec_from_key(request_type, grammar_spec, self.json_whitespace)
        constraint = self.source.compile(spec)
        return TrellisGrammar(constraint, max_rollback=self.num_speculative_tokens,
                              stop_token_ids=stop_token_ids)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """An all-ones int32 ``(max_num_seqs, ceil(vocab_size / 32))`` tensor."""
        return allocate_bitmask(max_num_seqs, self.vocab_size, backend="torch")

    def destroy(self):
        """Nothing to release: the compiled constraints are shared by the
        process's sources and freed with them."""


class TrellisGrammar(StructuredOutputGrammar):
    """One request's state: a :class:`~constrain.Matcher` over its compiled
    constraint, keeping ``max_rollback`` past states (the engine rolls back at
    most a draft's length).

    ``stop_token_ids`` (the request's EOS and stop tokens) end the output like
    EOS: those that are not the vocabulary's EOS are allowed exactly when the
    constraint is complete, and accepting one terminates the matcher.
    """

    def __init__(self, constraint: Constraint, max_rollback: int = 0,
                 stop_token_ids: set[int] | None = None):
        self.matcher = Matcher(constraint, max_rollback=max_rollback)
        vocab = constraint.vocab
        eos = set(vocab.eos_token_ids)
        self._eos = min(eos) if eos else None
        self._stops = frozenset(int(t) for t in (stop_token_ids or ()) if 0 <= int(t) < len(vocab)
                                and int(t) not in eos) if self._eos is not None else frozenset()
        # the stop tokens' words of a row and their bits there, one entry per word
        words: dict[int, int] = {}
        for t in self._stops:
            words[t >> 5] = words.get(t >> 5, 0) | (1 << (t & 31))
        self._stop_bits = tuple((w, np.uint32(b), np.uint32(~b & 0xFFFFFFFF))
                                for w, b in sorted(words.items()))
        # (bitmask, its data_ptr, its uint32 view): vLLM fills one tensor all along
        self._view = (None, 0, None)

    def _accept(self, token: int, m: Matcher | None = None) -> bool:
        """``token`` accepted by ``m`` (default: the request's matcher)."""
        if m is None:
            m = self.matcher
        if token in self._stops:
            # a stop token ends the output, never text: its mask bit says the
            # same (validate and accept took one as text where the mask refused it)
            return m.is_accepting() and m.accept_token(self._eos)
        return m.accept_token(token)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; tokens after termination are ignored. Returns
        ``False`` (and logs) at the first token the constraint refuses."""
        m = self.matcher
        for t in tokens:
            if m.is_terminated():
                return True
            if not self._accept(int(t)):
                logger.error("trellis: request %s: token %s refused by %r", request_id, t,
                             m.grammar)
                return False
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the constraint accepts from here,
        ending at termination; the state does not change."""
        if self.matcher.is_terminated():
            return []
        if not self._stops:
            # after EOS the constraint refuses everything: the prefix ends there
            return [int(t) for t in tokens[:self.matcher.validate_tokens(tokens)]]
        probe = self.matcher.fork()
        accepted = []
        for t in tokens:
            t = int(t)
            if probe.is_terminated() or not self._accept(t, probe):
                break
            accepted.append(t)
        return accepted

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        """Write the allowed next tokens into row ``idx``."""
        self.matcher.fill_next_token_bitmask(bitmask, idx)
        if self._stops:
            # a view made once per tensor and one step per word of stop tokens:
            # a row view and a step per token were ~7 us of every fill, now ~2.5
            # (vLLM passes the generation config's EOS ids as stop tokens)
            view = self._view
            if view[0] is not bitmask or view[1] != bitmask.data_ptr():
                view = self._view = (bitmask, bitmask.data_ptr(), bitmask.numpy().view(np.uint32))
            row = view[2][idx]
            if self.matcher.is_accepting():
                for w, bits, _ in self._stop_bits:
                    row[w] |= bits
            else:
                for w, _, clear in self._stop_bits:
                    row[w] &= clear

    def is_terminated(self) -> bool:
        """Whether EOS (or a stop token) has been accepted."""
        return self.matcher.is_terminated()

    def reset(self):
        """Back to the initial state."""
        self.matcher.reset()


__all__ = ["BACKEND_NAME", "TrellisBackend", "TrellisGrammar", "spec_from_key"]
