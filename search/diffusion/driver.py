"""Constrained decoding for masked-diffusion LMs: semi-autoregressive blocks,
denoising steps, remasking, with DINGO (regular constraints) or the infilling
check (context-free grammars) applied at every step.

The driver follows LLaDA's sampler (Nie et al. 2025, "Large Language Diffusion
Models", Algorithm 4 / ``generate.py``): the output is a canvas of ``gen_length``
mask tokens after the prompt, split into blocks of ``block_length`` decoded left
to right; each block gets ``steps / n_blocks`` denoising steps; at each step the
model scores every position, a token is proposed for every masked position of the
block, and ``k`` of them are kept (unmasked): the most confident ones
(``remasking="low_confidence"``) or random ones (``"random"``); the rest are
re-masked. ``k`` is spread evenly over the block's steps. EOS pads the end.

How a proposal is made (``method``):

* ``"none"``: each masked position's argmax (the constraint is only reported);
* ``"naive"`` (regular constraints): each masked position's argmax among the
  tokens that position could hold given the decided tokens (its *own* exact mask);
  positions chosen together can contradict each other;
* ``"dingo"`` (regular constraints): the most probable assignment of the whole
  block that can still be completed within the remaining positions (Suresh et al.
  2025, :func:`search.diffusion.dingo_dp.dingo`), so every kept subset is completable;
* ``"infill"`` (context-free grammars): positions in confidence order, each token
  checked with :func:`constrain.analysis.can_complete` on the partial output (decided
  runs and holes) and resampled (next most probable token) when the check fails
  (Mündler et al. 2025).

With ``temperature > 0`` the scores are ``logp / temperature + Gumbel noise``
(one draw per step, shared by all methods for the same ``seed``), so a method's
argmax is a sample; confidence is always the model's probability of the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from search.arguments import finite
from search.legacy import accepts_old_call_forms
from search.lm.protocol import prompt_token_ids
from search.results import SearchResult

__all__ = ["DiffusionResult", "diffusion_generate", "position_masks", "dingo_proposal"]

TERMINATED = -1


@dataclass(frozen=True)
class DiffusionResult(SearchResult):
    """The outcome of :func:`diffusion_generate`.

    Attributes:
        tokens: the ``gen_length`` generated ids (EOS padding included).
        text: the bytes of :attr:`token_ids` (special ids dropped; ``b""`` without
            a vocabulary).
        valid: whether ``text`` is a complete string of the constraint's language
            (``None`` without a constraint).
        score: sum, over positions, of the model's log-probability of the token
            kept there, at the step it was kept.
        steps: denoising steps run; calls: canvases the model scored.
        stuck_step: the first step after which the canvas could no longer
            be completed (``None`` if never; 0 when ``method="infill"``
            finds none within ``gen_length`` before its first step, where
            the other methods find it after that step); checked for regular
            constraints and, with ``method="infill"``, for grammars. From
            then on every method keeps the model's own choices.
        resamples: proposals rejected by the infilling check.
        history: per step, the ``(position, token)`` pairs kept.
        token_ids: the generated ids before the first EOS.
    """

    tokens: list
    text: bytes
    valid: bool | None
    score: float
    steps: int
    calls: int
    stuck_step: int | None = None
    resamples: int = 0
    history: list = field(default_factory=list)
    token_ids: tuple[int, ...] = ()


# -- per-position masks over a regular constraint ---------------------------------------


def position_masks(grammar, gen: Sequence[int], mask_id: int, positions=None):
    """Forward/backward reachability over the canvas ``gen`` (decided ids or
    ``mask_id``) for a :class:`constrain.DFAConstraint`, from its start state, with
    EOS allowed only where the grammar accepts and then only EOS.

    Returns ``(completable, masks)``: whether some filling of the masked positions
    gives a complete string of the language (exact), and for every masked position
    in ``positions`` (default: all) the sorted ids it may hold so that the canvas
    stays completable (empty when the canvas is not completable). Reference: the
    token-level DFA view of DINGO (Suresh et al. 2025).
    """
    eos = np.asarray(grammar.vocab.eos_token_ids, dtype=np.int64)
    eos_set = set(eos.tolist())
    L = len(gen)
    succ_cache: dict = {}

    def succ_any(q):
        s = succ_cache.get(q)
        if s is None:
            if q == TERMINATED:
                s = {TERMINATED}
            else:
                _, nexts = grammar.token_transitions(q)
                s = set(np.unique(nexts).tolist())
                if grammar.is_accepting(q):
                    s.add(TERMINATED)
            succ_cache[q] = s
        return s

    def succ_tok(q, t):
        if t in eos_set:
            return TERMINATED if (q == TERMINATED or grammar.is_accepting(q)) else None
        if q == TERMINATED:
            return None
        return grammar.advance(q, t)

    F = [set() for _ in range(L + 1)]
    F[0] = {grammar.initial_state()}
    for i in range(L):
        t = gen[i]
        nxt = set()
        for q in F[i]:
            if t == mask_id:
                nxt |= succ_any(q)
            else:
                r = succ_tok(q, t)
                if r is not None:
                    nxt.add(r)
        F[i + 1] = nxt
    B = [set() for _ in range(L + 1)]
    B[L] = {q for q in F[L] if q == TERMINATED or grammar.is_accepting(q)}
    for i in range(L - 1, -1, -1):
        t = gen[i]
        b = set()
        for q in F[i]:
            if t == mask_id:
                if succ_any(q) & B[i + 1]:
                    b.add(q)
            else:
                r = succ_tok(q, t)
                if r is not None and r in B[i + 1]:
                    b.add(q)
        B[i] = b
    completable = bool(B[0])
    masks = {}
    if positions is None:
        positions = [i for i in range(L) if gen[i] == mask_id]
    for i in positions:
        allowed = []
        if completable:
            target = np.fromiter(B[i + 1], dtype=np.int64) if B[i + 1] else np.zeros(0, np.int64)
            for q in F[i] & B[i]:
                if q != TERMINATED:
                    toks, nexts = grammar.token_transitions(q)
                    allowed.append(np.asarray(toks)[np.isin(nexts, target)])
                if (q == TERMINATED or grammar.is_accepting(q)) and TERMINATED in B[i + 1]:
                    allowed.append(eos)
        masks[i] = (np.unique(np.concatenate(allowed)).astype(np.int64) if allowed
                    else np.zeros(0, np.int64))
    return completable, masks


def _state_after(grammar, tokens) -> int | None:
    """The grammar state after ``tokens`` (EOS → terminated), ``None`` if refused."""
    eos = grammar.vocab.eos_token_set
    q = grammar.initial_state()
    for t in tokens:
        if t in eos:
            if q == TERMINATED or grammar.is_accepting(q):
                q = TERMINATED
                continue
            return None
        if q == TERMINATED:
            return None
        q = grammar.advance(q, int(t))
        if q is None:
            return None
    return q


# -- grammar (infilling) helpers ----------------------------------------------------------


def _segments(gen, mask_id, eos_set, trailing_exact: int | None):
    """The partial output of a canvas as infilling segments, or ``None`` when a
    decided token follows a decided EOS. Masks between decided tokens are holes of
    exactly their length; the masks after the last decided token may also be EOS
    padding, so they are a hole of up to their length; past ``trailing_exact``
    masks (``None``: never) the hole is unbounded instead, which ignores the
    length budget but keeps the automaton small."""
    from constrain.analysis import Hole

    first_eos = next((i for i, t in enumerate(gen) if t in eos_set), None)
    body = gen if first_eos is None else gen[:first_eos]
    if first_eos is not None and any(t != mask_id and t not in eos_set for t in gen[first_eos:]):
        return None
    segs, run, i = [], [], 0
    n = len(body)
    while i < n:
        if body[i] == mask_id:
            j = i
            while j < n and body[j] == mask_id:
                j += 1
            if run:
                segs.append(run)
                run = []
            if j == n:
                exact = trailing_exact is None or j - i <= trailing_exact
                segs.append(Hole(0, j - i) if exact else Hole(0, None))
            else:
                segs.append(Hole(j - i, j - i))
            i = j
        else:
            run.append(int(body[i]))
            i += 1
    if run:
        segs.append(run)
    return segs


# -- the driver ----------------------------------------------------------------------------


#: a line that defines a Lark rule or terminal (``start: ...``, ``?value.2: ...``,
#: ``NUMBER: ...``) or imports one
_LARK_LINE = re.compile(r"^\s*(?:[?!]?[a-z_][a-z_0-9]*|[A-Z_][A-Z_0-9]*)(?:\.-?\d+)?\s*:|^\s*%import\b",
                        re.MULTILINE)


def _constraint_in_prompt_place(args, kwargs) -> bool:
    """Whether a call's second positional argument is a constraint (the old form
    ``diffusion_generate(lm, constraint, prompt=...)``), not a prompt: ``None``,
    a constraint object, or Lark text (a rule or terminal definition) for a
    model that takes no text prompts; never when ``constraint=`` is given. (Any
    text was read as a grammar there: a text prompt to such a model was a Lark
    syntax error instead of the model's own refusal.)"""
    if len(args) < 2 or "constraint" in kwargs:
        return False
    x = args[1]
    if isinstance(x, str):
        return not hasattr(args[0], "prompt_ids") and _LARK_LINE.search(x) is not None
    return x is None or not isinstance(x, (Sequence, np.ndarray))


@accepts_old_call_forms(("constraint",), renamed={"model": "lm"}, is_old=_constraint_in_prompt_place)
def diffusion_generate(lm, prompt: str | Sequence[int] = (), *, constraint=None, gen_length: int,
                       block_length: int | None = None, steps: int | None = None,
                       remasking: str = "low_confidence", method: str | None = None,
                       temperature: float = 0.0, seed: int = 0, vocab=None,
                       max_tries: int = 8, trailing_exact: int | None = None,
                       infill_kwargs: dict | None = None) -> DiffusionResult:
    """Generate ``gen_length`` tokens after ``prompt`` with a masked-diffusion LM.

    Guarantee: with ``method="dingo"`` (default for a regular constraint) every
    step keeps the canvas completable within ``gen_length`` tokens, so the output is
    always a complete string of the language (``valid`` is True) unless the model
    gives every completion probability 0; with ``method="infill"`` (default for a
    grammar) every kept token passes the exact infilling check, length budget
    included, so likewise. With ``trailing_exact=n`` the check is exact only while
    at most ``n`` positions remain masked after the last decided token; before
    that they count as an unbounded hole (a smaller automaton, a faster check),
    which can let an early block commit to text too long to finish in time (then
    ``valid`` is False and ``stuck_step`` says when). References: LLaDA's sampler (Nie et al. 2025), DINGO
    (Suresh et al. 2025), constrained diffusion decoding (Mündler et al. 2025).

    Args:
        lm: a :class:`search.lm.diffusion.MaskedDiffusionLM`.
        prompt: ids before the canvas (not constrained); a text only for a model
            with ``prompt_ids``.
        constraint: ``None``, a :class:`constrain.DFAConstraint`, or a grammar that
            :func:`constrain.analysis.can_complete` takes (Lark text, a
            ``GrammarIR``, a :class:`constrain.GrammarConstraint`). (The old
            form, the constraint as the second positional argument, still works
            for one release, with a ``DeprecationWarning``.)
        gen_length, block_length (default ``gen_length``), steps (default
            ``gen_length``; a multiple of the number of blocks).
        remasking: ``"low_confidence"`` or ``"random"``.
        method: ``"none"``, ``"naive"``, ``"dingo"`` or ``"infill"`` (see the
            module docstring).
        temperature: 0 for argmax; otherwise Gumbel-max sampling at this temperature.
        seed: seeds the Gumbel noise and random remasking.
        vocab: the vocabulary (default: ``constraint.vocab`` or ``lm.vocab``),
            used to spell tokens and, for grammars, to count hole tokens.
        max_tries: infill: tokens tried at a position before moving to the next
            position (a position whose tries all fail is scanned exhaustively if
            no other position can be kept).
        trailing_exact: infill: see above (``None``, the default: always exact;
            the check's automaton grows with the masked positions).
        infill_kwargs: budgets passed to :func:`constrain.analysis.can_complete`.
    """
    from constrain import DFAConstraint

    is_dfa = isinstance(constraint, DFAConstraint)
    if method is None:
        method = "none" if constraint is None else ("dingo" if is_dfa else "infill")
    if method in ("naive", "dingo") and not is_dfa:
        raise TypeError(f"method={method!r} needs a regular constraint (constrain.DFAConstraint)")
    if method == "infill" and (constraint is None or is_dfa):
        raise TypeError("method='infill' needs a grammar (Lark text, a GrammarIR or a GrammarConstraint)")
    if method == "infill":
        from constrain.analysis.prepared import refuse_budgets

        refuse_budgets(constraint, "diffusion infilling")
    if method not in ("none", "naive", "dingo", "infill"):
        raise ValueError(f"unknown method {method!r}")
    if remasking not in ("low_confidence", "random"):
        raise ValueError(f"unknown remasking {remasking!r}")
    for name, value, least, optional in (("gen_length", gen_length, 1, False),
                                         ("block_length", block_length, 1, True),
                                         ("steps", steps, 1, True), ("max_tries", max_tries, 1, False),
                                         ("trailing_exact", trailing_exact, 0, True)):
        if value is None and optional:
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    finite("temperature", temperature, at_least=0)
    if vocab is None:
        vocab = getattr(constraint, "vocab", None) or getattr(lm, "vocab", None)
    block_length = gen_length if block_length is None else block_length
    if gen_length % block_length:
        raise ValueError("gen_length must be a multiple of block_length")
    n_blocks = gen_length // block_length
    steps = gen_length if steps is None else steps
    if steps % n_blocks:
        raise ValueError("steps must be a multiple of the number of blocks")
    spb = steps // n_blocks
    mask_id = lm.mask_token_id
    V = lm.vocab_size
    if isinstance(mask_id, (bool, np.bool_)) or not isinstance(mask_id, (int, np.integer)) \
            or not 0 <= mask_id < V:
        raise ValueError(f"the model's mask_token_id {mask_id!r} is not one of its {V} ids")
    if vocab is not None and constraint is not None and V != len(vocab):
        # (a column past the vocabulary reached DINGO as its mask column and
        # wrote -1 into the canvas; fewer columns were an error naming neither)
        raise ValueError(f"the model scores {V} ids (its vocab_size) but the constraint's "
                         f"vocabulary has {len(vocab)}: they must be the same ids")
    eos_ids = np.asarray(vocab.eos_token_ids if vocab is not None else
                         getattr(lm, "eos_token_ids", ()), dtype=np.int64)
    eos_set = set(eos_ids.tolist())
    rng = np.random.default_rng(seed)
    prompt = prompt_token_ids(lm, prompt)
    P0 = len(prompt)
    canvas = np.array(list(prompt) + [mask_id] * gen_length, dtype=np.int64)
    score = 0.0
    history = []
    stuck = None
    resamples = 0
    calls0 = getattr(lm, "calls", 0)
    step_no = 0
    ikw = dict(infill_kwargs or {})

    def completable_grammar(gen):
        from constrain.analysis import can_complete

        segs = _segments(list(gen), mask_id, eos_set, trailing_exact)
        return segs is not None and can_complete(constraint, segs, vocab=vocab, **ikw)

    if method == "infill" and not completable_grammar(canvas[P0:]):
        # no completion within gen_length at all: looking for a token that
        # keeps one would try every token at every position, every step
        stuck = 0

    for b in range(n_blocks):
        s, e = b * block_length, (b + 1) * block_length
        n_mask = block_length
        ks = [n_mask // spb + (1 if i < n_mask % spb else 0) for i in range(spb)]
        turn = 0
        while True:
            gen = canvas[P0:]
            masked = [i for i in range(s, e) if gen[i] == mask_id]
            if not masked:
                break
            # the infilling method may keep fewer than its share: extra steps then
            # finish the block, so no position is left masked
            k = min(ks[turn] if turn < len(ks) else len(masked), len(masked))
            turn += 1
            lp = np.asarray(lm.logprobs(canvas[None, :]), dtype=np.float64)[0, P0:]
            lp[:, mask_id] = -np.inf
            scores = lp.copy()
            if temperature > 0:
                with np.errstate(over="ignore"):
                    scaled = lp / temperature
                # a temperature so small that logp / T overflows (1e-310) is the
                # argmax, the softmax's limit (every score was -inf: no token)
                noise = rng.gumbel(size=lp.shape)
                if np.isfinite(scaled[np.isfinite(lp)]).all():
                    scores = scaled + noise
            rand = rng.random(size=gen_length)  # drawn every step: same stream for all methods
            x0 = {}
            if method == "none" or stuck is not None:
                # past completion (or without a constraint): the model's own choice
                for i in masked:
                    x0[i] = _model_choice(scores[i], mask_id)
            elif method == "naive":
                ok, masks = position_masks(constraint, list(gen), mask_id, masked)
                for i in masked:
                    m = masks[i]
                    x0[i] = int(m[np.argmax(scores[i, m])]) if len(m) else _model_choice(scores[i], mask_id)
            elif method == "dingo":
                x0 = dingo_proposal(constraint, gen, scores, s, e, mask_id, eos_ids, V)
                if x0 is None:  # no completion left: the model's own choice
                    x0 = {i: _model_choice(scores[i], mask_id) for i in masked}
            kept = None
            if method == "infill" and stuck is None:
                kept, rejected = _infill_keep(gen, masked, scores, lp, k, rand, remasking,
                                              max_tries, completable_grammar, mask_id)
                resamples += rejected
                if not kept:
                    # no token passes the check (it is inexact under
                    # trailing_exact): stuck from this step on, which then
                    # keeps the model's own choices as the other methods do
                    stuck = step_no + 1
                    x0 = {i: _model_choice(scores[i], mask_id) for i in masked}
            if not kept:
                kept = [(i, x0[i]) for i in _keep_order(masked, x0, lp, rand, remasking)[:k]]
            for i, t in kept:
                canvas[P0 + i] = t
                score += float(lp[i, t])
            history.append(kept)
            step_no += 1
            if constraint is not None and stuck is None:
                if is_dfa:
                    ok, _ = position_masks(constraint, list(canvas[P0:]), mask_id, [])
                else:
                    ok = completable_grammar(canvas[P0:])
                if not ok:
                    stuck = step_no
    out = [int(t) for t in canvas[P0:]]
    # the output ends at its first EOS
    token_ids = tuple(out[:next((i for i, t in enumerate(out) if t in eos_set), len(out))])
    text = b""
    if vocab is not None:
        text = b"".join(vocab.tokens[t] for t in token_ids if vocab.grammar_token_list[t])
    valid = None
    if constraint is not None:
        if is_dfa:
            end = _state_after(constraint, out)
            valid = end is not None and (end == TERMINATED or constraint.is_accepting(end))
        else:
            from constrain.analysis import can_complete

            segs = _segments(out, mask_id, eos_set, None)
            valid = (segs is not None and mask_id not in out
                     and can_complete(constraint, segs, vocab=vocab, **ikw))
    return DiffusionResult(out, text, valid, score, step_no, getattr(lm, "calls", 0) - calls0, stuck,
                           resamples, history, token_ids)


def dingo_proposal(grammar, gen, scores, s, e, mask_id, eos_ids, V):
    """The most probable assignment of the masked positions of block ``[s, e)`` of
    the canvas ``gen`` under ``scores`` (``len(gen) × V``) such that the canvas can
    still be completed within its length.

    Guarantee: exact: :func:`search.dingo` over the block's rows (decided
    positions fixed), then one row per later position (score 0 for every token)
    and one EOS-only row (DINGO, Suresh et al. 2025). Positions before ``s`` must
    be decided. Returns ``{position: token}`` for the masked positions of the
    block, or ``None`` when no completion exists (or all have score ``-inf``)."""
    from search.diffusion.dingo_dp import dingo

    q0 = _state_after(grammar, gen[:s])
    if q0 is None:
        return None
    L = len(gen)
    rows = np.zeros((L - s + 1, V), dtype=np.float64)
    for i in range(s, e):
        if gen[i] == mask_id:
            rows[i - s] = scores[i]
        else:
            rows[i - s] = -np.inf
            rows[i - s, gen[i]] = 0.0
    # positions after the block: undecided, any allowed token (score 0); last row EOS
    rows[e - s:L - s, mask_id] = -np.inf
    rows[L - s] = -np.inf
    rows[L - s, eos_ids] = 0.0
    r = dingo(rows, grammar, q0)
    if r is None:
        return None
    return {i: int(r.tokens[i - s]) for i in range(s, e) if gen[i] == mask_id}


def _keep_order(masked, proposal, lp, rand, remasking: str) -> list[int]:
    """The masked positions in the order they are kept: by the model's probability
    of their proposed token (``"low_confidence"`` remasking) or by the step's
    random draw (``"random"``), highest first, ties by position."""
    if remasking == "low_confidence":
        conf = {i: lp[i, proposal[i]] for i in masked}
    else:
        conf = {i: rand[i] for i in masked}
    return sorted(masked, key=lambda i: (-conf[i], i))


def _model_choice(row: np.ndarray, mask_id: int) -> int:
    """The best real token of a position's scores (the mask's are -inf): where
    every score is -inf (the model gives every token probability zero) the
    position is still filled, with the lowest real id, and the output is then
    invalid; argmax's 0 could be the mask id, which left the position masked
    and the block's loop running for ever."""
    t = int(np.argmax(row))
    if t == mask_id:
        t = 1 if mask_id == 0 else 0
    return t


def _infill_keep(gen, masked, scores, lp, k, rand, remasking, max_tries, completable, mask_id):
    """Keep ``k`` positions, in confidence order, each with the most probable token
    that passes the infilling check. Returns ``(kept, rejected)``."""
    work = np.array(gen, dtype=np.int64)
    best = {i: _model_choice(scores[i], mask_id) for i in masked}
    order = _keep_order(masked, best, lp, rand, remasking)
    kept, rejected = [], 0
    deferred = []
    for i in order:
        if len(kept) == k:
            break
        cands = np.argsort(-scores[i], kind="stable")
        cands = [int(t) for t in cands if np.isfinite(scores[i, t])]
        for t in cands[:max_tries]:
            work[i] = t
            if completable(work):
                kept.append((i, t))
                break
            rejected += 1
        else:
            work[i] = mask_id
            deferred.append((i, cands[max_tries:]))
    if not kept:
        # progress is guaranteed: a completable canvas has a valid token at every mask
        for i, rest in deferred:
            for t in rest:
                work[i] = t
                if completable(work):
                    return [(i, t)], rejected
                rejected += 1
            work[i] = mask_id
    return kept, rejected
