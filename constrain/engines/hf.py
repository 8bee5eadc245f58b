"""Hugging Face ``transformers`` integration: a logits processor that constrains
``model.generate`` with any compiled grammar.

Example::

    import constrain
    from constrain.engines.hf import LogitsProcessor

    vocab = constrain.Vocabulary.from_huggingface(tok, vocab_size=model.config.vocab_size)
    grammar = constrain.compile_regex(r"(yes|no)", vocab)
    out = model.generate(**inputs, logits_processor=[LogitsProcessor(grammar)],
                         max_new_tokens=8, num_beams=3)

It works with greedy search, sampling, beam search and batches (left-padded
prompts): every row's generated suffix — the tokens after the prompt length seen at
the first call — is looked up in a cache from generated-token tuples to grammar
states, so rows may be reordered between steps (as beam search does) and each step
costs one ``advance`` per row. Rows whose grammar state is terminated (EOS was
chosen) or dead (a token the grammar refuses, e.g. one forced by another
processor) allow only EOS and the pad id, so they end cleanly -- unless another
processor forbids EOS too (``min_new_tokens``, ``no_repeat_ngram_size``,
``bad_words_ids``): then no token is left (greedy takes id 0, sampling raises),
so do not combine them.

Use one processor per ``generate`` call, or call :meth:`LogitsProcessor.reset`
between calls; a call with prompts the processor has not seen resets it by itself.
A new prompt that starts with one it has seen (a second chat turn) is read as a
continuation, its new tokens as output: call :meth:`LogitsProcessor.reset` there.
(Telling the two apart from the rows alone would break assisted and prompt-lookup
decoding, whose steps shorten and lengthen the rows.)
"""

from __future__ import annotations

from typing import Iterable

try:  # subclass transformers' base class when it is there (not required)
    from transformers import LogitsProcessor as _Base
except Exception:  # pragma: no cover - transformers missing or broken
    _Base = object

__all__ = ["LogitsProcessor"]

_DEAD = object()  # the state of a row the grammar refused, or that went past EOS


class LogitsProcessor(_Base):
    """Masks the scores of ``model.generate`` so every row follows ``grammar``.

    Args:
        grammar: a compiled constraint (see :mod:`constrain.protocol`) whose
            vocabulary is the model's tokenizer's.
        pad_token_id: also allowed in finished rows (default: none besides EOS;
            transformers replaces the tokens of finished rows with the pad id itself).
        eos_token_ids: the ids allowed in terminated or dead rows (default: the
            grammar vocabulary's EOS ids).
    """

    def __init__(self, grammar, pad_token_id: int | None = None, eos_token_ids: Iterable[int] | None = None):
        from constrain.errors import ConstraintError, as_index
        from constrain.protocol import Constraint
        from constrain.vocab.vocabulary import _token_ids

        if not isinstance(grammar, Constraint):  # (None was an AttributeError)
            raise ConstraintError(f"grammar must be a compiled constraint, not "
                                  f"{type(grammar).__name__}")
        self.grammar = grammar
        self.vocab_size = len(grammar.vocab)
        ends = set(grammar.vocab.eos_token_ids) if eos_token_ids is None \
            else _token_ids("EOS", eos_token_ids)
        if pad_token_id is not None:
            # an id ("2" and 1.5 were read as ids)
            ends.add(as_index(pad_token_id, lambda: ConstraintError(
                f"pad_token_id must be a token id, not {pad_token_id!r}")))
        outside = sorted(i for i in ends if not 0 <= i < self.vocab_size)
        if outside:
            # dropped silently before: a finished row then had no token at all
            raise ConstraintError(f"token id {outside[0]} (EOS or pad) is outside the "
                                  f"grammar's vocabulary of {self.vocab_size}")
        self.end_token_ids = sorted(ends)
        self.reset()

    def reset(self) -> None:
        """Forget the rows of the previous ``generate`` call."""
        self.prompt_len: int | None = None
        self._prompts: set | None = None
        # the states of every generated suffix seen, as a trie: node ids, a
        # node's state, and (parent node, token) -> child. A dict keyed by the
        # suffixes themselves held every prefix of every row: 16 MB at 2,000
        # tokens, 64 MB at 4,000, where the trie holds one entry per token
        self._node_states: list = [self.grammar.initial_state()]
        self._children: dict = {}
        # the suffixes of the last call's rows -> their nodes (a row's parent
        # is one of them: the walk from the root is for the rows it is not,
        # e.g. after prompt-lookup decoding rolled candidates back)
        self._recent: dict = {(): 0}
        self._bitmask = None
        self._end_row = None

    # -- state tracking ---------------------------------------------------------

    def state_of(self, suffix: tuple[int, ...]):
        """The grammar state after the generated tokens ``suffix`` (``None`` if the
        grammar refuses them or they continue past EOS)."""
        st = self._state(tuple(suffix))
        return None if st is _DEAD else st

    def _state(self, suffix: tuple[int, ...]):
        return self._node_states[self._node(suffix)]

    def _node(self, suffix: tuple[int, ...]) -> int:
        """The trie node of ``suffix``, made (and its state computed) if new."""
        recent = self._recent
        node = recent.get(suffix)
        if node is not None:
            return node
        # normally the parent is a row of the last call, one token up
        parent = recent.get(suffix[:-1]) if suffix else None
        if parent is not None:
            return self._child(parent, suffix[-1])
        node = 0
        for t in suffix:
            node = self._child(node, t)
        return node

    def _child(self, node: int, token: int) -> int:
        key = (node, token)
        child = self._children.get(key)
        if child is None:
            st = self._node_states[node]
            if st is not _DEAD:
                if self.grammar.is_terminated(st):
                    st = _DEAD
                else:
                    nxt = self.grammar.advance(st, token)
                    st = _DEAD if nxt is None else nxt
            child = self._children[key] = len(self._node_states)
            self._node_states.append(st)
        return child

    def _allows_only_end(self, st) -> bool:
        return st is _DEAD or self.grammar.is_terminated(st)

    # -- the processor ------------------------------------------------------------

    def __call__(self, input_ids, scores):
        """Mask ``scores`` ``(rows, V)`` in place for the rows ``input_ids``
        ``(rows, seq)`` and return it."""
        from constrain.runtime.bitmask import allocate_bitmask, apply_bitmask

        rows, seq = input_ids.shape
        ids = input_ids.tolist()
        if self.prompt_len is not None:
            p = self.prompt_len
            if seq < p or any(tuple(r[:p]) not in self._prompts for r in ids):
                self.reset()  # a new generate call
        if self.prompt_len is None:
            self.prompt_len = seq
            self._prompts = {tuple(r) for r in ids}
        p = self.prompt_len

        if self._bitmask is None or self._bitmask.shape[0] != rows:
            self._bitmask = allocate_bitmask(rows, self.vocab_size, backend="torch")
        bm = self._bitmask
        recent = {}
        states = self._node_states
        for r, row in enumerate(ids):
            suffix = tuple(row[p:])
            node = recent[suffix] = self._node(suffix)
            st = states[node]
            if self._allows_only_end(st):
                bm[r] = self._end_bits(bm)
            else:
                self.grammar.fill_bitmask(st, bm, r)

        self._recent = recent
        apply_bitmask(scores, bm)  # moves the bitmask to the scores' device
        return scores

    def _end_bits(self, bm):
        if self._end_row is None:
            import torch

            row = torch.zeros(bm.shape[1], dtype=torch.int64)
            for t in self.end_token_ids:
                row[t // 32] |= 1 << (t % 32)
            # reinterpret as int32 words (two's complement for bit 31)
            row = torch.where(row >= 2**31, row - 2**32, row)
            self._end_row = row.to(torch.int32)
        return self._end_row
