"""``TokenTerminals``: how a grammar enforces :attr:`GrammarIR.tokens`, its
token-reference terminals (GBNF ``<[id]>``, ``<|name|>``, ``!<[id]>``; Lark
``<[1,3,5-7]>``, ``<[^id]>``).

What a reference matches
------------------------
One whole token whose id is in its set: never bytes, so never the same text
spelled by other tokens, and never part of a token. The set is its ids and
named tokens (a name is a token's text, ``<|im_end|>``, and must be exactly
one token of the vocabulary); a negated reference matches every token of the
vocabulary but those, EOS and padding ids excepted (as llama.cpp, whose
grammar never sees end-of-generation tokens; special tokens are in). A
reference may name an EOS id: after it the state is
:data:`~constrain.cfg.grammar.TERMINATED` when the grammar is complete there.

How the runtime sees it
-----------------------
A configuration is ``(context, lexer state)``: the parser's chart column and
the terminals in progress since the last boundary. A token reference is a
terminal whose automaton is a start state no byte leaves; so it is in the
lexer states that start the terminals a context expects, and in no state
reached by a byte. Its presence marks a configuration with no bytes since
its context's boundary, where a whole token may match the reference. One
reference (``marker``) is added to every start state, so that this holds
even where none is expected (the grammar may be complete there). So:

* the mask of ``(c, s)`` adds the ids of each reference in ``s`` that the
  parser can shift at ``c`` (and the boundary walk, which already unions the
  start configuration after a terminal that ends with the token before, adds
  those after it);
* advancing by a token adds, to the configurations of its bytes, those after
  each reference that admits it, from ``(c, s)`` itself when it has no bytes
  yet, and from ``(next(c, t), start)`` for each terminal ``t`` that ends in
  ``s``;
* a configuration with no bytes is complete when its context is.

The byte walk needs nothing: no byte path crosses a reference, so a token that
runs on past a point where only a reference may follow is refused by it. With
token budgets (:mod:`constrain.cfg.budgets`) a reference is in no budget: a
near-budget mask adds the same ids, and the configuration after a reference
counts 0 tokens.
"""

from __future__ import annotations

import re

import numpy as np

from constrain.cfg.budgets import _position
from constrain.cfg.ir import TokenRef
from constrain.errors import GrammarError, GrammarSyntaxError

_ID_ITEM = re.compile(r"[ \t]*([0-9]+)(?:[ \t]*-[ \t]*([0-9]+))?[ \t]*")


def parse_token_ref(text: str, pos: int, *, angle_names: bool) -> tuple:
    """The token reference written at offset ``pos`` of the grammar ``text``
    and the offset after it: ``<[ids]>`` (ids, ranges ``a-b`` and lists
    ``a,b``; ``<[^...]>`` negates; ``<[*]>`` is any token), ``<|name|>``, with ``angle_names`` any
    ``<text>`` (GBNF names a token by its text so), after an optional ``!``
    (negation, GBNF). A :class:`GrammarSyntaxError` with the line and column
    when it is malformed."""
    start = pos
    line, column = _position(text, start)
    negated = text.startswith("!", pos)
    if negated:
        pos += 1
    if text.startswith("<[", pos):
        close = text.find("]>", pos)
        body = text[pos + 2:close] if close >= 0 else ""
        if close < 0 or "\n" in body:
            raise GrammarSyntaxError("expected ']>' closing the token reference", line, column)
        if body.startswith("^"):
            if negated:
                raise GrammarSyntaxError("a token reference is negated twice ('!' and '^')",
                                         line, column)
            negated, body = True, body[1:]
        if "*" in body:  # llguidance's wildcard: any token, alone and not negated
            if body.strip() != "*" or negated:
                raise GrammarSyntaxError(
                    f"the wildcard <[*]> stands alone and is not negated, not "
                    f"{text[start:close + 2]!r}", line, column)
            return TokenRef((), (), True, line, column), close + 2
        ids = []
        for item in body.split(","):
            m = _ID_ITEM.fullmatch(item)
            if m is None:
                raise GrammarSyntaxError(
                    f"expected token ids (12, 5-7, 1,3) in {text[start:close + 2]!r}", line, column)
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise GrammarSyntaxError(f"token id range {lo}-{hi}: the end is below the start",
                                         line, column)
            ids.append((lo, hi))
        return TokenRef(tuple(ids), (), negated, line, column), close + 2
    if text.startswith("<|", pos) or (angle_names and text.startswith("<", pos)):
        end = text.find("|>" if text.startswith("<|", pos) else ">", pos + 1)
        name = text[pos:end + (2 if text.startswith("<|", pos) else 1)] if end >= 0 else ""
        if end < 0 or "\n" in name or len(name) < 3:
            raise GrammarSyntaxError("expected a token reference: <[id]> or a token's text "
                                     "in angle brackets", line, column)
        return TokenRef((), (name,), negated, line, column), pos + len(name)
    raise GrammarSyntaxError("expected a token reference after '!'", line, column)


def token_ids(ref, vocab) -> np.ndarray:
    """The sorted ids (int64) that the :class:`~constrain.cfg.ir.TokenRef`
    ``ref`` admits in ``vocab``; a :class:`GrammarError` at the reference's
    place for an id out of range, a name that is not exactly one token, or a
    set with no token."""
    n = len(vocab)
    where = (ref.line, ref.column)
    picked: set = set()
    for lo, hi in ref.ids:
        if not 0 <= lo <= hi < n:
            bad = hi if 0 <= lo < n else lo
            raise GrammarError(f"token id {bad} in {ref.shown} is outside the vocabulary "
                               f"{vocab.name} (ids 0 to {n - 1})", *where)
        picked.update(range(lo, hi + 1))
    if ref.names:
        by_text = _ids_by_text(vocab)
        for name in ref.names:
            ids = by_text.get(name.encode("utf-8", "surrogatepass"), ())
            if len(ids) != 1:
                raise GrammarError(
                    f"{name!r} is {'no token' if not ids else f'{len(ids)} tokens'} of the "
                    f"vocabulary {vocab.name} (a token reference names exactly one token by "
                    f"its text; <[id]> names one by id)", *where)
            picked.add(ids[0])
    if ref.negated:
        # the text tokens and the special ones: no EOS, padding or empty id
        keep = vocab.grammar_token_mask.copy()
        keep[sorted(vocab.special_token_ids)] = True
        keep[sorted(picked)] = False
        out = np.flatnonzero(keep).astype(np.int64)
    else:
        # a padding or empty id is no token: never allowed, named or not
        usable = vocab.grammar_token_mask
        special = vocab.special_token_ids
        eos = vocab.eos_token_set
        out = np.array(sorted(i for i in picked if usable[i] or i in special or i in eos),
                       dtype=np.int64)
    if not out.size:
        raise GrammarError(f"the token reference {ref.shown} matches no token of the "
                           f"vocabulary {vocab.name} (padding and empty ids are none)", *where)
    return out


def _ids_by_text(vocab) -> dict:
    def build():
        out: dict = {}
        for i, tok in enumerate(vocab.tokens):
            if tok:
                out.setdefault(tok, []).append(i)
        return out

    return vocab.derived("token ids by text", build)


class TokenTerminals:
    """The token references of one grammar over one vocabulary (see the module
    docstring): ``rows[t]``, the uint32 mask words of reference ``t``;
    ``marker``, the reference every start state holds; ``start_extra``, the
    bits a start state adds to the parser's expected set (``%ignore``
    terminals and the marker)."""

    def __init__(self, ir, vocab, lexer, ignore_bits: np.ndarray):
        words = (len(vocab) + 31) // 32
        self.lexer = lexer
        self.rows: dict[int, np.ndarray] = {}
        for t, ref in ir.tokens.items():
            ids = token_ids(ref, vocab)
            row = np.zeros(words, dtype=np.uint32)
            np.bitwise_or.at(row, ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
            row.flags.writeable = False
            self.rows[t] = row
        self.marker = min(ir.tokens)
        self.start_extra = ignore_bits.copy()
        self.start_extra[self.marker >> 6] |= np.uint64(1) << np.uint64(self.marker & 63)
        self._in_state: dict[int, tuple] = {}

    def in_state(self, s: int) -> tuple:
        """The references that lexer state ``s`` holds: empty unless ``s`` is a
        start state (no bytes since its boundary); the marker among them."""
        hit = self._in_state.get(s)
        if hit is None:
            lex = self.lexer
            terms = lex.pairs[lex.poff[s]:lex.poff[s + 1]:2].tolist()
            hit = self._in_state[s] = tuple(t for t in terms if t in self.rows)
        return hit

    def admits(self, t: int, token_id: int) -> bool:
        """Whether reference ``t`` matches the token ``token_id``."""
        # the row's bit, not a set of ids: a negated reference admits most of
        # the vocabulary, and a set of them cost ~3 MB per reference on SmolLM2
        return bool((self.rows[t].item(token_id >> 5) >> (token_id & 31)) & 1)


__all__ = ["TokenTerminals", "parse_token_ref", "token_ids"]
