"""Trellis as an SGLang grammar backend (``--grammar-backend trellis``).

SGLang has a registry for grammar backends
(``register_grammar_backend`` in ``sglang/srt/constrained/base_grammar_backend.py``)
and loads the ``sglang.srt.plugins`` entry points in every server process
before it builds its scheduler; Trellis's entry point, :func:`register`, adds
``"trellis"`` to the names ``--grammar-backend`` takes and registers
:class:`TrellisSGLangBackend` under it. Requests then constrain as with
SGLang's own backends: ``json_schema`` (and ``$$ANY$$``, any JSON value),
``regex``, ``ebnf`` (GBNF, or Lark: told apart by ``name ::=`` rule heads) and
``structural_tag`` (both of XGrammar's forms). With ``--reasoning-parser`` the
backend comes wrapped in SGLang's reasoning backend (:func:`make_backend`).

Supported releases: :data:`SUPPORTED` (checked at import). What is measured
against SGLang's own code, and what is not: docs/serving.md.
"""

from __future__ import annotations

import importlib.metadata
import logging

from constrain.engines.versions import supported

#: the supported SGLang releases: ``MIN <= (major, minor, patch) < MAX``
MIN_VERSION = (0, 5, 20)
MAX_VERSION = (0, 6, 0)
SUPPORTED = ">=0.5.20,<0.6"
#: the name ``--grammar-backend`` and ``ServerArgs(grammar_backend=...)`` take
BACKEND_NAME = "trellis"
#: past states a request keeps: a draft tree's depth, or a retokenized jump
#: (SGLang's xgrammar backend keeps as many)
MAX_ROLLBACK_TOKENS = 200


class UnsupportedSGLangError(ImportError):
    """The installed SGLang is not a release this integration supports."""


def check_version(version: str | None = None) -> str:
    """``version`` (default: the installed ``sglang``'s) if supported, else
    :class:`UnsupportedSGLangError` naming the supported range."""
    if version is None:
        try:
            version = importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            raise UnsupportedSGLangError(
                f"SGLang is not installed (Trellis's SGLang backend needs sglang{SUPPORTED})"
            ) from None
    if not supported(version, MIN_VERSION, MAX_VERSION):
        raise UnsupportedSGLangError(
            f"Trellis's SGLang backend supports sglang{SUPPORTED}, but sglang {version} is "
            f"installed: install a supported release, or leave Trellis out with "
            f"SGLANG_PLUGINS set to the plugins you want")
    return version


check_version()

import torch  # noqa: E402
from sglang.srt.constrained.base_grammar_backend import (  # noqa: E402
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
    register_grammar_backend,
)

from constrain.engines.requests import ConstraintSource, limits_from_env  # noqa: E402
from constrain.errors import ConstraintError  # noqa: E402
from constrain.protocol import Constraint  # noqa: E402
from constrain.runtime.batch import BatchMatcher  # noqa: E402
from constrain.runtime.bitmask import allocate_bitmask, apply_bitmask  # noqa: E402
from constrain.runtime.matcher import Matcher  # noqa: E402
from constrain.vocab.vocabulary import Vocabulary  # noqa: E402
from constrain.warmup import warm_up  # noqa: E402

logger = logging.getLogger(__name__)

class TrellisSGLangGrammar(BaseGrammarObject):
    """One request's state: a :class:`~constrain.Matcher` over its compiled
    constraint, keeping :data:`MAX_ROLLBACK_TOKENS` past states.

    As SGLang's scheduler expects: :meth:`accept_token` raises ``ValueError``
    on a token the constraint refuses and ignores tokens after termination
    (EOS); :meth:`copy` is a fresh request on the same compiled constraint."""

    def __init__(self, constraint: Constraint, key_string: str = "",
                 grammar_stats: GrammarStats | None = None,
                 batch_matcher: BatchMatcher | None = None):
        super().__init__()
        self.constraint = constraint
        #: fills a step's rows (:meth:`fill_vocab_mask_batched`): the backend's,
        #: shared by its requests
        self.batch_matcher = batch_matcher if batch_matcher is not None else BatchMatcher()
        self.matcher = Matcher(constraint, max_rollback=MAX_ROLLBACK_TOKENS)
        self.key_string = key_string
        self.grammar_stats = grammar_stats

    def __repr__(self) -> str:
        return (f"TrellisSGLangGrammar({self.constraint!r}, "
                f"accepted={self.matcher.num_accepted})")

    def accept_token(self, token: int) -> None:
        """Advance by ``token``; ``ValueError`` when the constraint refuses it."""
        m = self.matcher
        if m.is_terminated():
            return
        self.current_token = token
        if not m.accept_token(int(token)):
            raise ValueError(f"token {token} is not allowed by {self.constraint!r} "
                             f"after {m.num_accepted} tokens")

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens."""
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        """Whether EOS has been accepted."""
        return self.matcher.is_terminated()

    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device) -> torch.Tensor:
        """An int32 ``(batch_size, ceil(vocab_size / 32))`` CPU tensor, every
        token allowed (rows SGLang does not fill stay unconstrained)."""
        return allocate_bitmask(batch_size, vocab_size, backend="torch")

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        """Write the allowed next tokens into row ``idx``."""
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries, vocab_mask: torch.Tensor) -> None:
        """Fill the rows of ``entries`` (SGLang's ``GrammarRow`` pairs) in one
        :class:`~constrain.BatchMatcher` call; rows not listed stay as they are."""
        if entries:
            entries[0].grammar.batch_matcher.fill_next_token_bitmask(
                [e.grammar.matcher for e in entries], vocab_mask, [e.row for e in entries])

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        """Every token allowed again, in every row."""
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
        """The mask on the logits' device (a copy that does not block)."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """Set the logits of disallowed tokens to ``-inf``, in place (CPU or GPU)."""
        apply_bitmask(logits, vocab_mask)

    def copy(self) -> "TrellisSGLangGrammar":
        """A new request's grammar on the same compiled constraint, at its start."""
        stats = self.grammar_stats
        if stats is not None:
            stats = GrammarStats(dispatch_type=stats.dispatch_type, is_cache_hit=True)
        return TrellisSGLangGrammar(self.constraint, self.key_string, stats, self.batch_matcher)

    def try_jump_forward(self, tokenizer):
        """``([], text)`` when every completion starts with ``text``
        (:meth:`~constrain.Matcher.find_jump_forward_string`), else ``None``."""
        text = self.matcher.find_jump_forward_string()
        return ([], text) if text else None

    def jump_forward_str_state(self, helper) -> tuple[str, int]:
        """The text of :meth:`try_jump_forward`'s ``helper`` (no state number)."""
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids, new_output_ids, next_state: int) -> None:
        """Follow a retokenization: roll back to the first id that changed,
        then accept the new ids (``ValueError`` at one the constraint refuses)."""
        k = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            k += 1
        if k < len(old_output_ids):
            self.matcher.rollback(len(old_output_ids) - k)
        for token in new_output_ids[k:]:
            self.accept_token(token)


class TrellisSGLangBackend(BaseGrammarBackend):
    """The scheduler's backend: the model's vocabulary (ids up to
    ``vocab_size``; EOS the model's ``eos_token_ids`` where given), a
    :class:`~constrain.engines.requests.ConstraintSource` (compiler and
    compiled constraints; budgets from ``$TRELLIS_LIMITS`` and
    ``$TRELLIS_CACHE_BYTES``, as for vLLM), and Trellis's kernels loaded
    at start-up so that no request's time budget pays for them.

    A spec that does not compile gives SGLang an ``InvalidGrammarObject``
    with Trellis's message (which names the place): that request fails, the
    server goes on."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids=None, *,
                 any_whitespace: bool = True):
        super().__init__()
        if isinstance(eos_token_ids, int):  # a model config's single id
            eos_token_ids = [eos_token_ids]
        eos = sorted({int(t) for t in eos_token_ids}) if eos_token_ids else None
        vocab = Vocabulary.from_huggingface(tokenizer, vocab_size=int(vocab_size),
                                            eos_token_ids=eos)
        limits, cache_bytes = limits_from_env()
        self.source = ConstraintSource(vocab, limits=limits, cache_bytes=cache_bytes,
                                       json_whitespace="flexible" if any_whitespace
                                       else "compact")
        #: fills each step's rows, first visits on the threads that pay
        self.batch_matcher = BatchMatcher()
        warm_up(vocab)

    def _compile(self, kind: str, spec: dict, key_string: str) -> BaseGrammarObject:
        try:
            constraint = self.source.compile(spec)
        except ConstraintError as exc:
            logger.error("trellis: invalid %s %r: %s", kind, key_string[:200], exc)
            return InvalidGrammarObject(f"{type(exc).__name__}: {exc}")
        return TrellisSGLangGrammar(constraint, key_string, GrammarStats(dispatch_type=kind),
                                    self.batch_matcher)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        """A JSON Schema's text, or ``$$ANY$$`` for any JSON value."""
        return self._compile("json", {"json_schema": True if key_string == "$$ANY$$"
                                      else key_string}, key_string)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        """A Python ``re`` pattern, matched in full."""
        return self._compile("regex", {"regex": key_string}, key_string)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        """A GBNF grammar (start rule ``root``), or a Lark one (``start``)."""
        return self._compile("ebnf", {"grammar": key_string}, key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        """A structural tag's JSON text (the ``format`` form or the older
        ``structures``/``triggers`` one)."""
        return self._compile("structural_tag", {"structural_tag": key_string}, key_string)

    # the mask methods at the backend's level too, as SGLang's reasoning
    # backend (which wraps this one under --reasoning-parser) takes them from it
    allocate_vocab_mask = TrellisSGLangGrammar.allocate_vocab_mask
    move_vocab_mask = TrellisSGLangGrammar.move_vocab_mask
    apply_vocab_mask = TrellisSGLangGrammar.apply_vocab_mask

    @property
    def is_support_token_filter(self) -> bool:
        """Token filters are supported (``--enable-strict-thinking``)."""
        return True

    @staticmethod
    def set_token_filter(vocab_mask, token_ids, batch_idx, is_allowed=True,
                         reset_vocab_mask=True) -> None:
        """Allow (or forbid) only ``token_ids`` in row ``batch_idx``, or just
        set (clear) their bits without ``reset_vocab_mask``: SGLang's own
        torch operation on the bitmask, whose layout Trellis shares; what its
        reasoning backend uses inside the reasoning under
        ``--enable-strict-thinking`` and a thinking budget."""
        from sglang.srt.constrained.torch_ops.token_filter_torch_ops import (
            set_token_filter_torch,
        )

        set_token_filter_torch(vocab_mask, token_ids, batch_idx, is_allowed=is_allowed,
                               reset_vocab_mask=reset_vocab_mask)

    def reset(self) -> None:
        """SGLang's cache flush: its grammar cache, and Trellis's compiled
        constraints and compiler caches with it."""
        super().reset()
        self.source.clear()


def make_backend(server_args, tokenizer, vocab_size: int, eos_token_ids=None):
    """The function SGLang's registry calls to build the backend of a
    scheduler. ``server_args`` gives the JSON whitespace setting and the
    reasoning parser: with ``--reasoning-parser``, the backend is wrapped in
    SGLang's own reasoning backend, as SGLang wraps its built-in ones (the
    grammar applies once the model's reasoning has ended), when the parser's
    end marker is something the tokenizer encodes."""
    disable = bool(getattr(server_args, "constrained_json_disable_any_whitespace", False))
    backend = TrellisSGLangBackend(tokenizer, vocab_size, eos_token_ids,
                                   any_whitespace=not disable)
    parser_name = getattr(server_args, "reasoning_parser", None)
    if not parser_name:
        return backend
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    parser = ReasoningParser(model_type=parser_name, stream_reasoning=False, tokenizer=tokenizer)
    if not parser.detector.get_think_end_token_ids(tokenizer):
        logger.warning("trellis: the reasoning parser %r's end marker does not encode; "
                       "grammars apply from the first output token", parser_name)
        return backend
    return ReasonerGrammarBackend(
        backend, parser, tokenizer,
        enable_strict_thinking=bool(getattr(server_args, "enable_strict_thinking", False)))


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: ``"trellis"`` among the names
    ``--grammar-backend`` takes, and :func:`make_backend` under it in SGLang's
    registry. Safe to call more than once."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        GRAMMAR_BACKEND_CHOICES.append(BACKEND_NAME)
    register_grammar_backend(BACKEND_NAME, make_backend)


__all__ = ["BACKEND_NAME", "SUPPORTED", "MAX_ROLLBACK_TOKENS", "UnsupportedSGLangError",
           "check_version", "TrellisSGLangBackend", "TrellisSGLangGrammar", "make_backend",
           "register"]
