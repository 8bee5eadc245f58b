"""The language-model protocol that the search drivers use.

A model, for search, is anything with:

* ``lm.logprobs(prefixes) -> numpy array (len(prefixes), lm.vocab_size)``: the
  next-token log-probabilities after each prefix (a sequence of token ids: the
  prompt followed by the generated ids). ``-inf`` marks an impossible token; the
  drivers never expand it.
* ``lm.calls``: the number of prefixes scored so far. **Every row counts**, also
  a prefix scored before: drivers must not ask twice for the same prefix, and
  the counts of two drivers on the same model are directly comparable.
* ``lm.vocab_size``: the number of columns of ``logprobs``.
* ``lm.eos_token_ids``: a sorted tuple of the ids that end a hypothesis
  (``lm.eos_token_id`` is its first, the smallest, whatever order they were
  given in).

Optional, used when present:

* ``lm.prompt_ids(text)``: the ids of a text prompt (the chat template applied
  for chat models); without it the drivers take token-id prompts only
  (:func:`prompt_token_ids`);
* ``lm.decode(ids)`` or ``lm.vocab``: the text of generated ids, for the
  results' ``text`` (:func:`decoder`);
* ``lm.open_streams(head, n)``: lock-step token streams faster than one
  ``logprobs`` call per position (:func:`open_streams`).

:class:`CallableLM` wraps a plain function of one prefix (or of a batch of
prefixes) into this protocol; :func:`as_lm` adapts a :class:`search.TransformersLM`
(which already scores batches of prefixes and counts its calls) and passes any
other object that follows the protocol through unchanged.

Example::

    import numpy as np, search
    table = np.log(np.full(3, 1 / 3))
    lm = search.CallableLM(lambda prefix: table, vocab_size=3, eos_token_id=2)
    lm.logprobs([(0,), (0, 1)]).shape   # (2, 3); lm.calls == 2
"""

from __future__ import annotations

import sys
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["LM", "CallableLM", "TransformersLMAdapter", "as_lm", "prompt_token_ids", "decoder",
           "constraint_eos_ids", "LogprobStreams", "open_streams"]


@runtime_checkable
class LM(Protocol):
    """What the search drivers need from a model (see the module docstring)."""

    vocab_size: int
    eos_token_ids: tuple[int, ...]
    calls: int

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix, ``(len(prefixes), vocab_size)``."""
        ...


def _eos_tuple(eos) -> tuple[int, ...]:
    """EOS ids given as one id or an iterable of them, as a sorted tuple; a
    string (``"12"`` was read as ids 1 and 2), a bool or a float is a
    ``ValueError``."""
    from constrain.errors import as_index

    if eos is None:
        return ()
    if isinstance(eos, (str, bytes, bytearray, bool)) or not hasattr(eos, "__iter__"):
        # one id, or what cannot be one
        return (as_index(eos, lambda: ValueError(
            f"EOS ids are a token id or an iterable of them, not {eos!r}"[:200])),)
    return tuple(sorted({as_index(i, lambda: ValueError(f"EOS id {i!r} is not an integer token id"))
                         for i in eos}))


class CallableLM:
    """A model given by a function: the LM protocol around ``logprobs_fn``.

    Args:
        logprobs_fn: ``logprobs_fn(prefix: tuple[int, ...])`` returns a 1-D array of
            ``vocab_size`` log-probabilities of the next token (``-inf`` for
            impossible tokens). With ``batched=True`` it is called instead with a
            list of prefixes and returns an array ``(n, vocab_size)``.
        vocab_size: the number of token ids.
        eos_token_id: the id (or an iterable of ids) that ends a hypothesis.
        batched: see ``logprobs_fn``.

    Results are *not* cached: every prefix passed to :meth:`logprobs` counts one in
    :attr:`calls`, even one scored before (the drivers never ask twice for the
    same prefix, so ``calls`` measures their work).
    """

    def __init__(self, logprobs_fn: Callable, vocab_size: int, eos_token_id: int | Iterable[int],
                 *, batched: bool = False):
        self.logprobs_fn = logprobs_fn
        self.vocab_size = int(vocab_size)
        self.eos_token_ids: tuple[int, ...] = _eos_tuple(eos_token_id)
        if not self.eos_token_ids:
            raise ValueError("CallableLM needs at least one EOS token id")
        for i in self.eos_token_ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"EOS id {i} is outside the vocabulary of {self.vocab_size} tokens")
        self.batched = bool(batched)
        #: number of prefixes scored so far
        self.calls = 0

    def __repr__(self) -> str:
        return f"CallableLM(vocab_size={self.vocab_size}, eos_token_ids={self.eos_token_ids}, calls={self.calls})"

    @property
    def eos_token_id(self) -> int:
        """The first (smallest) EOS id."""
        return self.eos_token_ids[0]

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix: a float64 array
        ``(len(prefixes), vocab_size)``. Counts ``len(prefixes)`` calls."""
        prefixes = [tuple(int(t) for t in p) for p in prefixes]
        n = len(prefixes)
        if n == 0:
            return np.zeros((0, self.vocab_size))
        if self.batched:
            out = np.asarray(self.logprobs_fn(prefixes), dtype=np.float64)
        else:
            out = np.stack([np.asarray(self.logprobs_fn(p), dtype=np.float64).reshape(-1) for p in prefixes])
        if out.shape != (n, self.vocab_size):
            raise ValueError(f"logprobs_fn returned shape {out.shape}, expected {(n, self.vocab_size)}")
        self.calls += n
        return out


class TransformersLMAdapter:
    """The LM protocol over a :class:`search.TransformersLM` (or any object with
    ``logprobs``, ``calls``, ``vocab_size`` and ``eos_token_ids``).

    ``calls`` and ``tokens_computed`` are read from the wrapped model, so they
    count every prefix the model scored and every token it ran, through this
    adapter or not (``TransformersLM`` shares KV segments between prefixes: see
    :meth:`search.TransformersLM.logits`). ``prompt_ids``, ``encode``,
    ``decode``, ``vocab`` and ``open_streams`` are the wrapped model's.
    """

    def __init__(self, model):
        self.model = model
        self.vocab_size = int(model.vocab_size)
        self.eos_token_ids: tuple[int, ...] = _eos_tuple(getattr(model, "eos_token_ids", None)
                                                         or getattr(model, "eos_token_id", None))
        if not self.eos_token_ids:
            raise ValueError(f"{model!r} has no EOS token id")

    def __repr__(self) -> str:
        return f"TransformersLMAdapter({self.model!r})"

    @property
    def calls(self) -> int:
        """Prefixes the wrapped model has scored so far."""
        return int(self.model.calls)

    @property
    def tokens_computed(self) -> int:
        """Tokens the wrapped model has run so far (0 for a model that does not
        count them)."""
        return int(getattr(self.model, "tokens_computed", 0))

    @property
    def eos_token_id(self) -> int:
        """The first (smallest) EOS id."""
        return self.eos_token_ids[0]

    @property
    def vocab(self):
        """The wrapped model's :class:`constrain.Vocabulary`."""
        return self.model.vocab

    def prompt_ids(self, prompt, chat_template: bool | None = None, system: str | None = None) -> list[int]:
        """The wrapped model's :meth:`search.TransformersLM.prompt_ids`."""
        return self.model.prompt_ids(prompt, chat_template=chat_template, system=system)

    def encode(self, text: str) -> list[int]:
        """The wrapped model's ``encode``: the ids of ``text``, no special tokens."""
        return self.model.encode(text)

    def decode(self, token_ids: Iterable[int]) -> str:
        """The wrapped model's ``decode``: the text of ``token_ids``."""
        return self.model.decode(token_ids)

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix, ``(len(prefixes), vocab_size)``."""
        if len(prefixes) == 0:
            return np.zeros((0, self.vocab_size), dtype=np.float32)
        return self.model.logprobs([tuple(int(t) for t in p) for p in prefixes])

    def open_streams(self, head: Sequence[int], n: int):
        """Lock-step streams over the wrapped model (see :func:`open_streams`)."""
        return open_streams(self.model, head, n)


def as_lm(model):
    """``model`` as an object of the LM protocol: a :class:`CallableLM`, a
    :class:`TransformersLMAdapter` or any object that has ``logprobs``, ``calls``,
    ``vocab_size`` and ``eos_token_ids`` is returned as it is, a
    :class:`search.TransformersLM` (or an instance of a subclass) is wrapped in
    a :class:`TransformersLMAdapter`."""
    if isinstance(model, (CallableLM, TransformersLMAdapter)):
        return model
    # a TransformersLM exists only once its module is loaded: no import here
    # (nor its environment settings) for the other models
    transformers_lm = sys.modules.get("search.lm.transformers")
    if transformers_lm is not None and isinstance(model, transformers_lm.TransformersLM):
        return TransformersLMAdapter(model)
    missing = [a for a in ("logprobs", "calls", "vocab_size", "eos_token_ids") if not hasattr(model, a)]
    if missing:
        raise TypeError(f"{type(model).__name__} does not follow the LM protocol (missing {', '.join(missing)})")
    return model


# -- what every driver does with a model ---------------------------------------------


def prompt_token_ids(lm, prompt) -> tuple[int, ...]:
    """The ids a driver conditions on: a text ``prompt`` through ``lm.prompt_ids``
    (for a :class:`search.TransformersLM`: the chat template for chat models, the
    plain encoding otherwise); a sequence of ids as it is. Raises ``TypeError``
    for text when the model has no ``prompt_ids``."""
    if isinstance(prompt, str):
        fn = getattr(lm, "prompt_ids", None)
        if fn is None:
            raise TypeError(f"{type(lm).__name__} has no prompt_ids() to turn a text prompt into ids; "
                            f"pass token ids instead")
        return tuple(int(t) for t in fn(prompt))
    fn = getattr(lm, "prompt_ids", None)
    if fn is not None:  # a model's own check (a Hugging Face model: ids below its embeddings)
        return tuple(int(t) for t in fn(prompt))
    return tuple(check_prompt_ids(prompt, None))


def check_prompt_ids(prompt, vocab_size: int | None) -> list[int]:
    """``prompt``, a sequence of token ids, as a list of ints, each checked to be
    a non-negative integer below ``vocab_size`` (``None``: not bounded above, as
    for a :class:`CallableLM`, whose prompts may hold ids it never scores):
    ``TypeError`` or ``ValueError`` otherwise. (``int()`` took ``1.5`` for 1,
    bytes were read as ids, and an id past the model's embeddings was torch's
    ``IndexError``.)"""
    if isinstance(prompt, (bytes, bytearray)):
        raise TypeError("a prompt is text (str) or a sequence of token ids, not bytes")
    if hasattr(prompt, "tolist"):  # a numpy array or torch tensor of ids
        prompt = prompt.tolist()
        if not isinstance(prompt, list):
            prompt = [prompt]
    ids = []
    for t in prompt:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"a prompt's token ids are integers, not {t!r}")
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            raise ValueError(f"prompt token id {int(t)} is negative" if t < 0 else
                             f"prompt token id {int(t)} is outside the model's {vocab_size} ids")
        ids.append(int(t))
    return ids


def decoder(lm) -> Callable[[Sequence[int]], str] | None:
    """The text of generated ids for the results of a driver on ``lm``:
    ``lm.decode``, else the UTF-8 decoding of ``lm.vocab``'s token bytes (an
    incomplete character shown as U+FFFD), else ``None`` (no text)."""
    fn = getattr(lm, "decode", None)
    if fn is not None:
        return fn
    vocab = getattr(lm, "vocab", None)
    if vocab is None:
        return None
    return lambda ids: vocab.decode([int(t) for t in ids]).decode("utf-8", errors="replace")


def as_constraint(constraint, vocab):
    """``constraint`` as a compiled constraint over ``vocab``: a Python type (a
    Pydantic model, a dataclass, ``Literal[...]``...) is compiled with
    :func:`constrain.compile_type` (cached); anything else is returned as given."""
    if constraint is None:
        return None
    from constrain.frontends.python_types import compile_type, is_python_type

    if is_python_type(constraint):
        return compile_type(constraint, vocab)
    return constraint


def output_value(constraint, text: str, complete) -> tuple[object, str | None]:
    """``(value, error)``: the validated object of ``text`` when ``constraint``
    has an output type (see :func:`as_constraint`), else ``(None, None)``. An
    incomplete text (``complete`` false) or one that does not validate gives
    ``(None, why)``."""
    output = getattr(constraint, "output_type", None)
    if output is None:
        return None, None
    if not complete:
        return None, "the output is not complete (cut off before the end of the value)"
    try:
        return output.parse(text), None
    except Exception as e:  # pydantic.ValidationError: a validator no schema states
        return None, f"{type(e).__name__}: {e}"


def check_constraint_vocabulary(lm, constraint) -> None:
    """Raise :class:`constrain.VocabularyError` unless ``constraint`` (a
    compiled constraint, anything with a ``vocab``) was compiled for ``lm``'s
    tokens: no more tokens than the model scores, and where the model has a
    ``vocab``, the same token bytes. (A constraint of another vocabulary read
    the model's ids as its own: a beam search over SmolLM2 with a 3-token
    constraint returned SmolLM2's special tokens as a finished answer.)"""
    from constrain import Vocabulary, VocabularyError

    cv = getattr(constraint, "vocab", None)
    if not isinstance(cv, Vocabulary):
        raise TypeError(f"a constraint is a compiled constraint (constrain.compile_regex, "
                        f"compile_json_schema, compile_grammar...), not {type(constraint).__name__}")
    if len(cv) > lm.vocab_size:
        raise VocabularyError(
            f"the constraint was compiled for a vocabulary of {len(cv)} tokens, "
            f"but the model has {lm.vocab_size} log-probabilities")
    mv = getattr(lm, "vocab", None)
    if not isinstance(mv, Vocabulary) or cv is mv or cv == mv:
        return
    n = len(cv)
    if list(mv.tokens[:n]) != list(cv.tokens[:n]):
        raise VocabularyError(
            f"the constraint was compiled against vocabulary {cv.name!r}, whose tokens differ "
            f"from the model's ({mv.name!r}); compile it with lm.vocab")


def constraint_eos_ids(lm, constraint) -> frozenset[int]:
    """The ids that end a hypothesis: the constraint vocabulary's EOS ids (allowed
    only where it accepts), or ``lm.eos_token_ids`` without a constraint. Raises
    :class:`constrain.VocabularyError` when the constraint was not compiled for
    the model's tokens (:func:`check_constraint_vocabulary`)."""
    if constraint is None:
        return frozenset(int(i) for i in lm.eos_token_ids)
    check_constraint_vocabulary(lm, constraint)
    return frozenset(int(i) for i in constraint.vocab.eos_token_ids)


# -- lock-step streams -------------------------------------------------------------------


class LogprobStreams:
    """Token streams over any model of the protocol: each :meth:`advance` is one
    ``lm.logprobs`` batch over the streams it extends. Made by :func:`open_streams`."""

    def __init__(self, lm, head: tuple[int, ...], n: int):
        self.lm = lm
        self.prefixes = [head] * n

    def advance(self, idx: Sequence[int], toks: Sequence[int]) -> np.ndarray:
        """Extend streams ``idx`` by ``toks``: their float64 next-token
        log-probabilities ``(len(idx), V)``, one call each."""
        pre = self.prefixes
        for i, t in zip(idx, toks):
            pre[i] = pre[i] + (int(t),)
        return np.asarray(self.lm.logprobs([pre[i] for i in idx]), dtype=np.float64)


def open_streams(lm, head: Sequence[int], n: int):
    """``n`` token streams after ``head``, advanced in lock-step: ``(streams,
    rows)``, ``rows`` the float64 next-token log-probabilities ``(n, V)`` after
    ``head`` (scored once, one call), and ``streams.advance(idx, toks)`` the rows
    after extending streams ``idx`` (a sub-sequence of those still live, in order;
    the others end) by ``toks``, one call per row. A model with its own
    ``open_streams`` (a :class:`search.TransformersLM`: one batched forward pass
    per position over a shared KV cache) provides them; any other gets
    :class:`LogprobStreams`."""
    own = getattr(lm, "open_streams", None)
    if own is not None:
        return own(head, n)
    head = tuple(int(t) for t in head)
    row = np.asarray(lm.logprobs([head])[0], dtype=np.float64)
    return LogprobStreams(lm, head, n), np.tile(row, (n, 1))
