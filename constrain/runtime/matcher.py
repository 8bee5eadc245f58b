"""``Matcher``: the stateful wrapper over an immutable constraint, for serving
engines that keep one mutable object per request.

Its methods are those of XGrammar's ``GrammarMatcher`` and of vLLM's
``StructuredOutputGrammar``: accept, validate and roll back tokens, fill the
next-token bitmask (and the bitmasks of a speculative draft), fork, reset, and
jump-forward decoding.
"""

from __future__ import annotations

import bisect

import numpy as np

from constrain.errors import BitmaskError, ConstraintError, InvalidLimitError
from constrain.protocol import Constraint, check_token_id
from constrain.runtime.bitmask import bitmask_words, check_bitmask
from constrain.vocab.vocabulary import Vocabulary, tokenizer_encoder

#: the longest jump-forward string looked for (bytes): a bound, not a limit of
#: any grammar; a forced run this long is cut here and found again after it
MAX_JUMP_FORWARD_BYTES = 4096


class Matcher:
    """Tracks one generation's state through a constraint.

    Keeps the history of states, so :meth:`rollback` undoes the last ``n``
    accepted tokens (speculative decoding, jump-forward) in O(n). States are
    immutable, so :meth:`fork` is cheap and the constraint may be shared by
    any number of matchers and threads; one matcher belongs to one thread at a
    time.

    Args:
        grammar: any compiled constraint.
        max_rollback: how many past states to keep (``None``: all).
    """

    __slots__ = ("grammar", "max_rollback", "_history")

    def __init__(self, grammar: Constraint, max_rollback: int | None = None):
        if not isinstance(grammar, Constraint):
            raise ConstraintError(f"a Matcher needs a compiled constraint, not "
                                  f"{type(grammar).__name__}")
        if max_rollback is not None and (isinstance(max_rollback, bool)
                                         or not isinstance(max_rollback, (int, np.integer))
                                         or max_rollback < 0):
            raise InvalidLimitError(f"max_rollback must be None or a count >= 0, "
                                    f"not {max_rollback!r}", "max_rollback")
        if max_rollback is not None:
            max_rollback = int(max_rollback)
        self.grammar = grammar
        self.max_rollback = max_rollback
        self._history = [grammar.initial_state()]

    def __repr__(self) -> str:
        return (f"Matcher({self.grammar!r}, accepted={self.num_accepted}, "
                f"terminated={self.is_terminated()})")

    @property
    def state(self):
        """The current (immutable) state."""
        return self._history[-1]

    @property
    def num_accepted(self) -> int:
        """How many accepted tokens :meth:`rollback` can still undo."""
        return len(self._history) - 1

    # -- accepting tokens -------------------------------------------------------------

    def _push(self, states: list) -> None:
        history = self._history
        history.extend(states)
        keep = self.max_rollback
        if keep is not None and len(history) > keep + 1:
            del history[:len(history) - keep - 1]

    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id``; returns ``False`` (and changes nothing) if the
        token is not allowed. An id outside the vocabulary raises
        :class:`~constrain.InvalidStateError`."""
        nxt = self.grammar.advance(self._history[-1], self._token(token_id))
        if nxt is None:
            return False
        self._push([nxt])
        return True

    def accept_tokens(self, token_ids) -> bool:
        """Accept several tokens, all or nothing: when one is refused (or raises),
        the matcher is as it was before the call."""
        if not isinstance(token_ids, (list, tuple, np.ndarray)):
            token_ids = _id_list(token_ids)  # an iterator: counted below
        states = self._walk(token_ids)
        if len(states) < len(token_ids):
            return False
        self._push(states)
        return True

    def validate_tokens(self, token_ids) -> int:
        """How many of ``token_ids`` (a prefix) would be accepted one after
        another; the matcher does not change."""
        return len(self._walk(token_ids))

    def _walk(self, token_ids) -> list:
        """The states after each token of the longest accepted prefix."""
        advance = self.grammar.advance
        state, out = self._history[-1], []
        if not isinstance(token_ids, (list, tuple, np.ndarray)):
            token_ids = _id_list(token_ids)
        for t in token_ids:
            state = advance(state, self._token(t))
            if state is None:
                break
            out.append(state)
        return out

    def _token(self, token_id) -> int:
        """``token_id`` as an ``int`` (numpy and torch integers too), or
        :class:`~constrain.InvalidStateError`: ``int()`` would take ``97.5``
        for 97 and ``-1`` for the last id."""
        if token_id.__class__ is int:
            return token_id
        return check_token_id(token_id, len(self.grammar.vocab))

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens (``0 <= n <=``
        :attr:`num_accepted`)."""
        n = self._rollback_count(n)
        if n:
            del self._history[-n:]

    def _rollback_count(self, n) -> int:
        """``n`` as a count :meth:`rollback` can undo, else
        :class:`~constrain.ConstraintError` (``int()`` would take ``1.7`` and
        ``True`` for 1)."""
        if getattr(n, "ndim", None) == 0 and hasattr(n, "item"):
            n = n.item()  # a torch or numpy scalar (a bool one stays refused)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ConstraintError(f"a rollback count is an integer, not {n!r}")
        if not 0 <= n <= len(self._history) - 1:
            raise ConstraintError(
                f"cannot roll back {n!r} tokens: only {len(self._history) - 1} can be undone")
        return int(n)

    def fork(self) -> "Matcher":
        """An independent matcher in the same state, with the same history (a
        new list of the same immutable states)."""
        new = Matcher.__new__(Matcher)
        new.grammar = self.grammar
        new.max_rollback = self.max_rollback
        new._history = self._history.copy()
        return new

    def reset(self) -> None:
        """Back to the initial state, with no history."""
        self._history = [self.grammar.initial_state()]

    def is_terminated(self) -> bool:
        """Whether EOS has been accepted (nothing more is allowed)."""
        return self.grammar.is_terminated(self._history[-1])

    def is_accepting(self) -> bool:
        """Whether the output so far is complete (EOS would be accepted)."""
        return self.grammar.is_accepting(self._history[-1])

    # -- masks ------------------------------------------------------------------------

    def fill_next_token_bitmask(self, bitmask, index: int = 0) -> None:
        """Write the allowed next tokens into row ``index`` of ``bitmask``."""
        self.grammar.fill_bitmask(self._history[-1], bitmask, index)

    def allowed_token_ids(self):
        """The allowed next token ids, sorted."""
        return self.grammar.allowed_token_ids(self._history[-1])

    def fill_draft_bitmasks(self, draft_ids, bitmask, start_row: int = 0) -> int:
        """The bitmasks of a speculative draft, without changing the matcher.

        Row ``start_row + i`` gets the mask before draft token ``i`` and row
        ``start_row + k`` the mask after the last of the ``k`` draft tokens:
        ``k + 1`` rows, what a verifier scoring the draft and its bonus token
        needs. Stops at the first draft token that the constraint refuses:
        its row holds the mask that refused it, and the rows after it are left
        as they are. Returns how many draft tokens were accepted (``k`` when all
        were), so that rows ``start_row .. start_row + accepted`` are filled."""
        advance, fill = self.grammar.advance, self.grammar.fill_bitmask
        state = self._history[-1]
        # the bitmask checked once, and its row count from that check
        target, start_row = check_bitmask(bitmask, bitmask_words(len(self.grammar.vocab)),
                                          start_row)
        n_rows = target.n_rows
        # every id checked before any row is written: a bad one half-way
        # raised with the rows before it filled
        v = len(self.grammar.vocab)
        draft_ids = [check_token_id(t, v) for t in draft_ids]
        if start_row + len(draft_ids) >= n_rows:
            raise BitmaskError(
                f"a draft of {len(draft_ids)} tokens needs rows {start_row}..."
                f"{start_row + len(draft_ids)}, but the bitmask has {n_rows}")
        for i, t in enumerate(draft_ids):
            fill(state, bitmask, start_row + i)
            state = advance(state, t)
            if state is None:
                return i
        fill(state, bitmask, start_row + len(draft_ids))
        return len(draft_ids)

    # -- jump-forward -----------------------------------------------------------------

    def find_jump_forward_bytes(self, max_bytes: int = MAX_JUMP_FORWARD_BYTES) -> bytes:
        """The bytes every completion of the output must start with: the
        longest run of next bytes that the constraint leaves no choice about
        (empty when EOS is allowed, or two bytes may follow). At most
        ``max_bytes``. The matcher does not change. Empty, too, for a
        constraint whose ``advance_bytes`` counts a call as a token
        (:attr:`~constrain.Constraint.byte_steps_are_tokens`: token budgets):
        a walk of its bytes, one call or many, spends tokens no tokenization
        spends mid-token, so it prunes paths a token keeps (byte by byte,
        ``start: r | "abz"`` with ``r[max_tokens=1]: "abc"`` forced ``abz``,
        though the token ``abc`` is allowed)."""
        if isinstance(max_bytes, (bool, np.bool_)) or not isinstance(max_bytes, (int, np.integer)) \
                or max_bytes < 0:
            raise InvalidLimitError(f"max_bytes must be a count >= 0, not {max_bytes!r}",
                                    "max_bytes")
        g = self.grammar
        if g.byte_steps_are_tokens:
            return b""
        state = self._history[-1]
        out = bytearray()
        # a grammar's token reference (<[id]>) may take the next token whole,
        # whatever bytes are forced otherwise
        refs = getattr(g, "allows_token_reference", None)
        while len(out) < max_bytes and not g.is_terminated(state) and not g.is_accepting(state):
            nxt = np.flatnonzero(g.allowed_bytes(state))
            if len(nxt) != 1 or (refs is not None and refs(state)):
                break
            b = bytes((int(nxt[0]),))
            state = g.advance_bytes(state, b)
            if state is None:  # pragma: no cover - allowed_bytes said it continues
                break
            out += b
        return bytes(out)

    def find_jump_forward_string(self, max_bytes: int = MAX_JUMP_FORWARD_BYTES) -> str:
        """:meth:`find_jump_forward_bytes` as text: the longest prefix of those
        bytes made of whole UTF-8 characters."""
        data = self.find_jump_forward_bytes(max_bytes)
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                return data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return ""

    def jump_forward_tokens(self, tokenizer_or_vocab, max_bytes: int = MAX_JUMP_FORWARD_BYTES
                            ) -> list[int]:
        """Tokens that may be appended without calling the model: the
        tokenizer's own encoding of :meth:`find_jump_forward_string`, cut
        before the token that holds the first byte where a vocabulary token
        could start and run past the forced text into bytes the constraint
        allows next (the tokenizer might then split the whole output
        otherwise: it writes ``'":' '".'`` for ``'":"./'``, not ``'":"'``
        ``'./'``). Empty when nothing is forced or the encoding does not spell
        the forced bytes. The matcher does not change: accept the tokens with
        :meth:`accept_tokens`.

        ``tokenizer_or_vocab``: a ``transformers`` or ``tokenizers`` tokenizer,
        a tiktoken ``Encoding``, a ``str -> ids`` callable, or a
        :class:`~constrain.Vocabulary` read from a tokenizer (it keeps the
        tokenizer's :attr:`~constrain.Vocabulary.encoder`)."""
        vocab = self.grammar.vocab
        if isinstance(tokenizer_or_vocab, Vocabulary):
            encode = tokenizer_or_vocab.encoder
            if encode is None:
                raise ConstraintError(
                    f"the vocabulary {tokenizer_or_vocab.name} was not read from a tokenizer "
                    f"(Vocabulary.from_huggingface): pass the tokenizer itself")
        else:
            encode = tokenizer_encoder(tokenizer_or_vocab)
            if encode is None:
                raise ConstraintError(f"cannot encode text with a {type(tokenizer_or_vocab).__name__}")
        text = self.find_jump_forward_string(max_bytes)
        if not text:
            return []
        data = text.encode("utf-8")
        ids = [int(i) for i in encode(text)]
        spelled = b"".join(vocab.token_bytes(i) if 0 <= i < len(vocab) else b"\0" for i in ids)
        if spelled != data or not all(vocab.grammar_token_mask[i] for i in ids):
            return []  # a tokenizer that adds a prefix space, or spells otherwise
        g = self.grammar
        tokens, longest = _grammar_tokens(vocab)
        end = g.advance_bytes(self._history[-1], data)
        follow = _next_bytes(g, end)
        budget = [_MAX_EXTENSION_TRIES]
        # the first place where a token could start and run past the forced
        # text into what may follow: a token boundary there ('":' then '"' of
        # a string value) or inside a token (the tokenizer wrote '":' '".' for
        # '":"./', not '":"' './'): the tokens from the one holding it on are
        # left out. A token that starts before the last ``longest`` bytes
        # cannot run past them
        cut = next((p for p in range(max(0, len(data) - longest + 1), len(data))
                    if _runs_past(g, end, data[p:], tokens, follow, budget)), len(data))
        # a run of whitespace at the end is split by what follows it (GPT-2's
        # and Llama 3's pre-tokenizers: '\s+(?!\S)' writes '\n' '\n' 'Yes' for
        # '\n\nYes' but '\n\n' at the end), so it is left to the model
        run = len(data) - len(data.rstrip(b" \t\n\r\x0b\x0c"))
        if run >= 2 and (follow is None or follow):
            cut = min(cut, len(data) - run)
        at, keep = 0, 0
        for i in ids:
            at += len(vocab.token_bytes(i))
            if at > cut:
                break
            keep += 1
        ids = ids[:keep]
        # the grammar allows them (the bytes are forced): checked all the same
        return ids[:self.validate_tokens(ids)]


def _id_list(token_ids) -> list:
    """``token_ids`` (any iterable; a torch tensor or numpy array by its
    elements) as a list, or :class:`~constrain.ConstraintError`."""
    if getattr(token_ids, "ndim", None) == 1 and hasattr(token_ids, "tolist"):
        return token_ids.tolist()  # a bool or float array's items stay refused one by one
    if isinstance(token_ids, (str, bytes)) or getattr(token_ids, "ndim", 1) != 1:
        raise ConstraintError(f"token ids come as a flat sequence of ints, not {token_ids!r}")
    try:
        return list(token_ids)
    except TypeError:
        raise ConstraintError(f"token ids come as a flat sequence of ints, not {token_ids!r}") from None


def _grammar_tokens(vocab: Vocabulary) -> tuple[list, int]:
    """The grammar tokens' bytes of ``vocab``, sorted, and the longest's length
    (kept by the vocabulary)."""
    def build():
        tokens = sorted(vocab.token_bytes(i) for i in np.flatnonzero(vocab.grammar_token_mask))
        return tokens, max(map(len, tokens), default=0)

    return vocab.derived("sorted grammar tokens and the longest", build)


#: ``advance_bytes`` tries of longer tokens one :meth:`Matcher.jump_forward_tokens`
#: makes before it assumes one of them may come (a grammar may allow every
#: byte after the forced text, and thousands of tokens start with it)
_MAX_EXTENSION_TRIES = 1024


def _next_bytes(g, end) -> list | None:
    """The bytes the constraint ``g`` allows after the forced text (state
    ``end``), or ``None`` when it cannot say (then any may follow)."""
    if end is None:
        return None
    try:
        allowed = g.allowed_bytes(end)
    except NotImplementedError:
        return None
    refs = getattr(g, "allows_token_reference", None)
    if refs is not None and refs(end):
        return None
    return np.flatnonzero(allowed).tolist()


def _runs_past(g, end, suffix: bytes, tokens: list, follow, budget: list) -> bool:
    """Whether a vocabulary token longer than ``suffix`` (the forced text from
    some byte to its end, reached in state ``end``) starts with it and the
    constraint ``g`` lets its rest follow: then the model's next token could
    merge with the forced text. After a key's ``":`` in an integer member no
    ``"`` may follow, so the token ``":"`` cannot. ``True``, the cautious
    answer, where ``follow`` (the allowed next bytes) is ``None`` or the
    shared ``budget`` of tries is spent."""
    k = bisect.bisect_right(tokens, suffix)
    if not (k < len(tokens) and tokens[k].startswith(suffix)):
        return False
    if follow is None:
        return True
    n = len(suffix)
    for b in follow:
        prefix = suffix + bytes((b,))
        k = bisect.bisect_left(tokens, prefix)
        while k < len(tokens) and tokens[k].startswith(prefix):
            if budget[0] <= 0:
                return True
            budget[0] -= 1
            if g.advance_bytes(end, tokens[k][n:]) is not None:
                return True
            k += 1
    return False


__all__ = ["Matcher", "MAX_JUMP_FORWARD_BYTES"]
