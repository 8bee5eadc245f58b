"""DINGO: the most probable constrained block for a diffusion LM (Suresh et al.,
NeurIPS 2025).

A diffusion LM predicts a block of ``d`` positions at once, each with its own
distribution over the vocabulary. :func:`dingo` returns the single most probable
block whose tokens, read in order, keep the output a valid prefix of a regular
constraint. It is exact dynamic programming over (position, automaton state),
unlike masking each position independently (which can pick tokens that are each
allowed somewhere but not in sequence).

Semantics (see ``docs/dingo.md``):

* a grammar token ``t`` at a position moves the automaton ``q → δ(q, t)`` and is
  allowed iff ``grammar.advance(q, t)`` is not ``None``;
* an EOS id is allowed iff the state accepts; it moves to ``TERMINATED`` (-1), after
  which only EOS ids (or the mask) are allowed: a block may end with EOS padding;
* the optional mask column (column ``V`` of a ``d × (V+1)`` array) leaves a position
  undecided: it contributes its log-probability, no bytes, and the state does not
  move. It is reported as :data:`MASK` (-1) in ``tokens``;
* an entry of ``-inf`` has probability zero: a block using it is never returned. If
  every valid block has probability zero the result is ``None``.

Ties (equal floating-point scores) are broken towards the lexicographically
smallest sequence of ids, the mask counted as id ``V`` (after every token).
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

import numpy as np

__all__ = ["MASK", "DingoResult", "dingo"]

#: The id reported in :attr:`DingoResult.tokens` for a position left undecided.
MASK = -1
#: ``constrain.regular.regex.TERMINATED``: the state after EOS
TERMINATED = -1

# ``import search`` stays light: constrain and numba are imported on the first call.

@dataclass(frozen=True)
class DingoResult:
    """The most probable valid block.

    Attributes:
        tokens: ``d`` token ids; :data:`MASK` (-1) where the position is left
            undecided (only with a mask column).
        logprob: the sum of the chosen entries (``math.fsum``, correctly rounded).
        state: the automaton state after the block (``-1`` once EOS was chosen).
    """

    tokens: list[int]
    logprob: float
    state: int

    #: the sentinel of undecided positions in ``tokens``
    MASK = MASK


# -- token-level tables ---------------------------------------------------------------


@dataclass
class _Tables:
    """Token transitions grouped by (source, target): group ``g`` of state ``s`` is
    ``gptr[s] <= g < gptr[s+1]``; it leads to ``gnext[g]`` with the tokens
    ``gtok[tptr[g]:tptr[g+1]]`` (ascending ids)."""

    gptr: np.ndarray
    gnext: np.ndarray
    tptr: np.ndarray
    gtok: np.ndarray
    accepting: np.ndarray


def _group(n: int, indptr: np.ndarray, toks: np.ndarray, nexts: np.ndarray,
           accepting: np.ndarray) -> _Tables:
    """Group a CSR token table (``n`` states) by (source, next state), tokens
    ascending within a group."""
    indptr = np.asarray(indptr, dtype=np.int64)
    toks = np.asarray(toks, dtype=np.int32)
    nexts = np.asarray(nexts, dtype=np.int32)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    order = np.lexsort((toks, nexts, src))
    src, toks, nexts = src[order], toks[order], nexts[order]
    start = np.ones(len(src), dtype=bool)
    if len(src):
        start[1:] = (src[1:] != src[:-1]) | (nexts[1:] != nexts[:-1])
    firsts = np.flatnonzero(start)
    tptr = np.append(firsts, len(src)).astype(np.int64)
    gnext = nexts[firsts].astype(np.int32)
    gptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src[firsts], minlength=n), out=gptr[1:])
    return _Tables(gptr, gnext, tptr, np.ascontiguousarray(toks),
                   np.ascontiguousarray(accepting, dtype=np.bool_))


def _tables_bytes(key, tables: _Tables) -> int:
    return sum(a.nbytes for a in (tables.gptr, tables.gnext, tables.tptr, tables.gtok,
                                  tables.accepting))


@functools.lru_cache(maxsize=1)
def _eager_cache():
    """The bounded cache of eager tables, registered with
    :data:`constrain.cache.registry` (made on first use: ``import search``
    imports no constrain). Keyed by a weak reference to the grammar: equal only
    to a reference to the same live grammar, so a new grammar at a dead one's
    address never reads its tables (which stay until evicted)."""
    from constrain.cache import BoundedCache, registry

    return registry.register(BoundedCache("DINGO eager tables", 256 << 20, max_entries=64,
                                          sizeof=_tables_bytes))


def _eager_tables(grammar) -> _Tables:
    """The grouped tables of every state of an eager grammar (built once, kept
    in a bounded cache of :data:`constrain.cache.registry`), from its
    ``token_transitions``: slices of the precomputed table, so the whole build
    is one pass over the states."""

    def build() -> _Tables:
        n = grammar.num_states
        rows = [grammar.token_transitions(q) for q in range(n)]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(toks) for toks, _ in rows], out=indptr[1:])
        return _group(n, indptr, np.concatenate([toks for toks, _ in rows]),
                      np.concatenate([nexts for _, nexts in rows]), grammar.dfa.accepting)

    return _eager_cache().get_or_build(weakref.ref(grammar), build)


def _lazy_tables(grammar, state: int, d: int):
    """Grouped tables over the states reachable from ``state`` within ``d`` tokens,
    for grammars whose masks are computed on demand. Returns ``(tables, states)``:
    local state ``j`` is global state ``states[j]``."""
    index = {state: 0}
    states = [state]
    frontier = [state]
    for _ in range(d):
        nxt = []
        for q in frontier:
            toks, nexts = grammar.token_transitions(q)
            for r in np.unique(nexts).tolist():
                if r not in index:
                    index[r] = len(states)
                    states.append(r)
                    nxt.append(r)
        frontier = nxt
        if not frontier:
            break
    indptr = [0]
    all_toks, all_nexts = [], []
    for q in states:
        toks, nexts = grammar.token_transitions(q)
        all_toks.append(np.asarray(toks, dtype=np.int32))
        # states beyond the horizon are never used (the kernel stops at layer d)
        all_nexts.append(np.fromiter((index.get(r, 0) for r in nexts.tolist()),
                                     dtype=np.int32, count=len(nexts)))
        indptr.append(indptr[-1] + len(toks))
    n = len(states)
    accepting = grammar.dfa.accepting[np.asarray(states)]
    tables = _group(n, np.asarray(indptr), np.concatenate(all_toks) if n else np.zeros(0),
                    np.concatenate(all_nexts) if n else np.zeros(0), accepting)
    return tables, states


# -- the kernel ------------------------------------------------------------------------


def _dingo_kernel_py(lp, n_vocab, has_mask, eos, gptr, gnext, tptr, gtok, accepting, start):
    """Exact best block by dynamic programming over (position, state).

    States ``0..n-1`` are the grammar's (local) states, ``n`` is TERMINATED.
    Pass 1 collects the states reachable at each layer (the graph only). Pass 2
    computes, backwards, ``B[i, q]``: the best score of positions ``i..d-1`` from
    state ``q``, and the choice (token, index of the next (layer, state)) that
    attains it, the smallest id on ties (mask = ``n_vocab``). Returns
    ``(score, tokens, final_state)``; ``score`` is ``-inf`` when no block has
    positive probability.
    """
    d = lp.shape[0]
    n = gptr.shape[0] - 1
    term = n
    ninf = -np.inf
    # pass 1: reachable states per layer
    cap = (d + 1) * 64 + 64
    lay = np.empty(cap, np.int32)
    lptr = np.zeros(d + 2, np.int64)
    stamp = np.full(n + 1, -1, np.int64)
    lay[0] = start
    lptr[1] = 1
    has_eos = eos.shape[0] > 0
    for i in range(d):
        a = lptr[i]
        b = lptr[i + 1]
        k = b
        for j in range(a, b):
            q = lay[j]
            if k + (n + 1) > lay.shape[0]:
                new = np.empty(max(lay.shape[0] * 2, k + n + 1), np.int32)
                new[:k] = lay[:k]
                lay = new
            if q == term:
                if stamp[term] != i + 1:
                    stamp[term] = i + 1
                    lay[k] = term
                    k += 1
                continue
            for g in range(gptr[q], gptr[q + 1]):
                r = gnext[g]
                if stamp[r] != i + 1:
                    stamp[r] = i + 1
                    lay[k] = r
                    k += 1
            if has_mask and stamp[q] != i + 1:
                stamp[q] = i + 1
                lay[k] = q
                k += 1
            if has_eos and accepting[q] and stamp[term] != i + 1:
                stamp[term] = i + 1
                lay[k] = term
                k += 1
        lptr[i + 2] = k
    total = lptr[d + 1]
    score = np.empty(total, np.float64)
    choice_tok = np.full(total, -2, np.int64)
    choice_next = np.full(total, -1, np.int64)
    # pass 2: backwards. pos[state] = index of state in the layer after the current
    pos = np.full(n + 1, -1, np.int64)
    for j in range(lptr[d], lptr[d + 1]):
        score[j] = 0.0
        pos[lay[j]] = j
    cur = np.full(n + 1, -1, np.int64)
    for i in range(d - 1, -1, -1):
        row = lp[i]
        mask_lp = row[n_vocab] if has_mask else ninf
        # best EOS at this position (smallest id on ties)
        eos_lp = ninf
        eos_id = -1
        for e in eos:
            v = row[e]
            if v > eos_lp:
                eos_lp = v
                eos_id = e
        for j in range(lptr[i], lptr[i + 1]):
            q = lay[j]
            cur[q] = j
            best = ninf
            btok = -2
            bnext = -1
            if q != term:
                for g in range(gptr[q], gptr[q + 1]):
                    nj = pos[gnext[g]]
                    sn = score[nj]
                    if sn == ninf:
                        continue
                    gm = ninf
                    gt = -1
                    for k in range(tptr[g], tptr[g + 1]):
                        t = gtok[k]
                        v = row[t]
                        if v > gm:
                            gm = v
                            gt = t
                    if gm == ninf:
                        continue
                    c = gm + sn
                    if c > best or (c == best and gt < btok):
                        best = c
                        btok = gt
                        bnext = nj
            if eos_id >= 0 and eos_lp > ninf and (q == term or accepting[q]):
                nj = pos[term]
                sn = score[nj]
                if sn > ninf:
                    c = eos_lp + sn
                    if c > best or (c == best and eos_id < btok):
                        best = c
                        btok = eos_id
                        bnext = nj
            if mask_lp > ninf:
                nj = pos[q]
                sn = score[nj]
                if sn > ninf:
                    c = mask_lp + sn
                    # the mask counts as id n_vocab: it wins ties against nothing
                    if c > best or (c == best and btok < 0):
                        best = c
                        btok = n_vocab
                        bnext = nj
            score[j] = best
            choice_tok[j] = btok
            choice_next[j] = bnext
        # the layer just done becomes "next" for layer i-1
        for j in range(lptr[i], lptr[i + 1]):
            pos[lay[j]] = cur[lay[j]]
    tokens = np.full(d, -2, np.int64)
    if d == 0:
        return 0.0, tokens, np.int64(start)
    s0 = score[0]
    if s0 == ninf:
        return ninf, tokens, np.int64(start)
    j = 0
    for i in range(d):
        tokens[i] = choice_tok[j]
        j = choice_next[j]
    return s0, tokens, np.int64(lay[j])


# a lazy constant: importing numba waits for the first DINGO call (import
# search imports this module)
@functools.lru_cache(maxsize=1)
def _kernel():
    """:func:`_dingo_kernel_py` compiled by numba (on first use; cached on disk)."""
    from numba import njit

    return njit(cache=True, nogil=True)(_dingo_kernel_py)


# -- the public function ---------------------------------------------------------------


def dingo(block_logprobs, grammar, state: int) -> DingoResult | None:
    """The most probable block of ``d`` tokens that keeps the output a valid prefix.

    Exact DINGO dynamic programming: ``W[i, q] = max over (q', t) with δ(q', t) = q
    of W[i-1, q'] + logp[i, t]``, over the states reachable from ``state`` only,
    in ``O(d · E)`` where ``E`` is the number of token transitions of the reachable
    states (at most ``|Q|·|V|``).

    Args:
        block_logprobs: array-like ``(d, V)`` of log-probabilities, ``V =
            len(grammar.vocab)``; or ``(d, V+1)`` where the last column is the
            mask ("leave this position undecided": it contributes its
            log-probability, no bytes, and the state does not move). ``-inf``
            entries are never chosen. Any float dtype; it is not modified.
        grammar: a regular constraint from :func:`constrain.compile_regex`.
        state: the grammar's current state (``grammar.initial_state()``, a state
            from ``grammar.advance``, or ``-1`` once terminated: then only EOS ids
            and the mask are allowed).

    Returns:
        A :class:`DingoResult` (``tokens`` with :data:`MASK` for undecided positions,
        ``logprob``, ``state`` after the block), or ``None`` if no valid block has a
        finite log-probability. Ties go to the lexicographically smallest ids
        (mask counted as id ``V``).

    Raises:
        TypeError: ``grammar`` is not a regular (DFA) constraint.
        constrain.ConstraintError: wrong shape or size, NaN or ``+inf`` entries.
        constrain.InvalidStateError: ``state`` is not a live state of ``grammar``
            (a ``ConstraintError`` too).
    """
    from constrain import ConstraintError
    from constrain import DFAConstraint
    if not isinstance(grammar, DFAConstraint):
        raise TypeError(
            f"dingo needs a regular constraint (constrain.DFAConstraint from compile_regex), "
            f"not {type(grammar).__name__}")
    try:
        lp = np.asarray(block_logprobs)
    except ValueError as e:  # a ragged list
        raise ConstraintError(f"block_logprobs is no 2-D array of numbers: {e}") from None
    n_vocab = len(grammar.vocab)
    if lp.ndim != 2:
        raise ConstraintError(
            f"block_logprobs must be 2-D (positions × vocabulary), got shape {lp.shape}")
    if lp.shape[1] == n_vocab:
        has_mask = False
    elif lp.shape[1] == n_vocab + 1:
        has_mask = True
    else:
        raise ConstraintError(
            f"block_logprobs has {lp.shape[1]} columns but the vocabulary {grammar.vocab.name} "
            f"has {n_vocab} tokens: expected {n_vocab} (or {n_vocab + 1} with a mask column)")
    if lp.dtype.kind not in "fiu":
        raise ConstraintError(f"block_logprobs must hold real numbers, not {lp.dtype}")
    if lp.dtype not in (np.float32, np.float64):
        lp = lp.astype(np.float64)
    lp = np.ascontiguousarray(lp)
    if lp.size and (np.isnan(lp).any() or np.isposinf(lp).any()):
        raise ConstraintError("block_logprobs contains NaN or +inf")
    finite = lp[np.isfinite(lp)]
    if finite.size and float(np.abs(finite).max()) * lp.shape[0] > 1e307:
        # (a block's sum overflowed: -inf read as "no valid block", fsum raised)
        raise ConstraintError("block_logprobs holds scores so large that a block's sum "
                              "overflows")
    state = _check_state(grammar, state)
    d = lp.shape[0]
    eos = np.asarray(grammar.vocab.eos_token_ids, dtype=np.int64)

    if grammar.tokens.eager:
        tables = _eager_tables(grammar)
        states = None
        start = grammar.num_states if state == TERMINATED else state
    else:
        if state == TERMINATED:
            tables, states = _group(0, np.zeros(1), np.zeros(0), np.zeros(0),
                                    np.zeros(0, bool)), []
            start = 0
        else:
            tables, states = _lazy_tables(grammar, state, d)
            start = 0
    score, toks, final = _kernel()(lp, n_vocab, has_mask, eos, tables.gptr, tables.gnext,
                                       tables.tptr, tables.gtok, tables.accepting, start)
    if score == -np.inf:
        return None
    n = tables.gptr.shape[0] - 1
    final = int(final)
    if final == n:
        final = TERMINATED
    elif states is not None:
        final = states[final]
    tokens = [MASK if t == n_vocab else int(t) for t in toks.tolist()]
    logprob = math.fsum(float(lp[i, n_vocab if t == MASK else t]) for i, t in enumerate(tokens))
    return DingoResult(tokens, logprob, final)


def _check_state(grammar, state) -> int:
    """``state`` as an int, checked to be TERMINATED or a live state of ``grammar``."""
    from constrain import InvalidStateError

    if isinstance(state, (bool, np.bool_)) or not isinstance(state, (int, np.integer)):
        raise InvalidStateError(f"state must be an int state of {grammar!r}, got {state!r}")
    state = int(state)
    if state == TERMINATED:
        return state
    if not 0 < state < grammar.num_states or not grammar.tokens.is_live(state):
        raise InvalidStateError(
            f"state {state} is not a live state of {grammar!r} (states come from "
            f"initial_state() and advance(); 0 is the dead state)")
    return state
