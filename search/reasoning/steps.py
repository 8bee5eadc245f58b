"""Step-level machinery shared by the reasoning searches (:mod:`search.reasoning.astar`,
:mod:`search.reasoning.foresight`, :mod:`search.reasoning.rerank`).

A *solution* is a sequence of *steps*; a step is the text the model writes up to
and including the step delimiter (``"\\n"`` by default), or up to EOS, which ends
the solution (a *final* step). The searches differ only in which partial solutions
they extend and how they score them; what a step is, how one is sampled, how
tokens and PRM calls are counted against a budget and how the answer format is
enforced live here, so that their counts are comparable.

Counting (the same in every search):

* **tokens**: every token the model sampled (EOS included), kept or not — also
  the tokens of a candidate that was cut off or discarded — plus the delimiter
  tokens inserted before a constrained answer line. A budget is checked *before*
  each token, so ``tokens <= token_budget`` always.
* **model calls**: ``lm.calls`` after minus before (one per scored prefix, see
  :mod:`search.lm.protocol`).
* **PRM calls**: one per ``prm.score`` (or ``prm.score_last``) invocation, i.e. one
  per partial solution scored; checked before each call.

Answer format (``constraint``): the answer line of a complete solution must be a
complete string of the constraint's language (e.g. ``#### -?[0-9]+``). Steps are
sampled freely; when a step ends the solution (EOS) and its tokens are not, on
their own, accepted by the constraint, the step's text is kept, the delimiter is
appended, and an answer line is generated under the constraint (the model's
next-token distribution restricted to the allowed tokens and renormalised, EOS
only once the constraint accepts: the same masking as :func:`search.generate`).
Once the constraint accepts, a token containing the delimiter also ends the
answer line (and is not kept): an answer line is a line, and without this the
model, refused the newline it wants after ``#### 12``, is pushed into appending
digits. That answer line is part of the final step. A candidate whose answer line is cut
off (``max_step_tokens`` or the token budget) is dropped.
"""

from __future__ import annotations

import dataclasses
import math
import re
from decimal import Decimal, InvalidOperation
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from search.arguments import count
from search.lm.protocol import as_lm, constraint_eos_ids, open_streams, prompt_token_ids
from search.results import SearchResult

__all__ = ["Step", "Solution", "Budget", "ReasoningResult", "LMStepSampler", "HookStepSampler",
           "StepOptions", "UNSET", "step_options", "extract_answer", "prm_score_last",
           "aggregate_scores"]


@dataclass(frozen=True)
class Step:
    """One step of a solution.

    Attributes:
        text: the step's text, delimiter included (EOS excluded).
        token_ids: its token ids (EOS excluded); empty for steps given by a hook.
        logprob: the model's log-probability of the sampled tokens, EOS included
            (un-tempered, not renormalised by a constraint); 0 for hook steps.
        final: whether the step ends the solution (EOS, or a hook's final step).
        n_tokens: tokens spent producing it (see the module docstring).
        cost: the step's cost for A*'s ``g`` when a hook gave one, else ``None``.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprob: float = 0.0
    final: bool = False
    n_tokens: int = 1
    cost: float | None = None


@dataclass(frozen=True)
class Solution:
    """A (partial or complete) solution: a tuple of :class:`Step`."""

    steps: tuple[Step, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether the last step ends the solution."""
        return bool(self.steps) and self.steps[-1].final

    @property
    def text(self) -> str:
        """The steps' texts concatenated."""
        return "".join(s.text for s in self.steps)

    @property
    def step_texts(self) -> list[str]:
        """The steps' texts, each stripped of surrounding whitespace (what a PRM sees)."""
        return [s.text.strip() for s in self.steps]

    @property
    def token_ids(self) -> tuple[int, ...]:
        """All the steps' token ids (EOS excluded)."""
        return tuple(t for s in self.steps for t in s.token_ids)

    @property
    def logprob(self) -> float:
        """Sum of the steps' log-probabilities."""
        return float(sum(s.logprob for s in self.steps))

    @property
    def n_tokens(self) -> int:
        """Tokens in the solution's steps (EOS counted once if complete)."""
        return len(self.token_ids) + (1 if self.complete and self.steps[-1].token_ids else 0)

    def extend(self, step: Step) -> "Solution":
        """This solution followed by ``step``."""
        return Solution(self.steps + (step,))


class Budget:
    """Counts tokens and PRM calls against optional limits (``None``: unlimited).

    The invariant ``tokens <= max_tokens`` and ``prm_calls <= max_prm_calls`` holds
    because callers ask :meth:`take_token` / :meth:`take_prm_call` *before*
    spending; a refusal sets :attr:`exhausted` to ``"token_budget"`` or
    ``"prm_budget"``.
    """

    def __init__(self, max_tokens: int | None = None, max_prm_calls: int | None = None):
        self.max_tokens = count("token_budget", max_tokens, optional=True)
        self.max_prm_calls = count("prm_budget", max_prm_calls, optional=True)
        self.tokens = 0
        self.prm_calls = 0
        self.exhausted: str | None = None

    def tokens_left(self) -> float:
        """Tokens that may still be spent (``inf`` without a limit)."""
        return math.inf if self.max_tokens is None else self.max_tokens - self.tokens

    def take_token(self, n: int = 1) -> bool:
        """Spend ``n`` tokens if they fit; else spend nothing, mark the budget
        exhausted and return ``False``."""
        if self.max_tokens is not None and self.tokens + n > self.max_tokens:
            self.exhausted = self.exhausted or "token_budget"
            return False
        self.tokens += n
        return True

    def take_prm_call(self) -> bool:
        """Spend one PRM call if it fits (same contract as :meth:`take_token`)."""
        if self.max_prm_calls is not None and self.prm_calls >= self.max_prm_calls:
            self.exhausted = self.exhausted or "prm_budget"
            return False
        self.prm_calls += 1
        return True


@dataclass(frozen=True)
class ReasoningResult(SearchResult):
    """What the reasoning searches return.

    Attributes:
        solution: the chosen :class:`Solution` (``None`` if nothing was produced).
        answer: the final answer extracted from it (``None`` if none).
        complete: whether ``solution`` is a complete solution. A search stopped by
            its budget returns the best it found, possibly incomplete.
        budget_exhausted: whether a token or PRM budget stopped the search.
        stop_reason: why it stopped: ``"solution"`` (A*: a complete solution was
            popped), ``"token_budget"``, ``"prm_budget"``, ``"frontier_empty"``,
            ``"max_depth"``, ``"consensus"`` (foresight depth pruning), ``"done"``.
        tokens: tokens spent (see :mod:`search.reasoning.steps`).
        lm_calls: prefixes the model scored (``lm.calls`` delta).
        prm_calls: PRM invocations.
        score: the driver's score of the solution, when there is one: its PRM
            score (aggregated) for A* and best-of-N; for foresight search its
            foresight value, the mean token log-probability of its roll-out
            (φ-Decoding's ``F``; the PRM only weighs the selection).
        candidates: other solutions considered (best-of-N: all samples).
        info: search-specific details (expansions, per-method choices, ...).
    """

    solution: Solution | None
    answer: str | None
    complete: bool
    budget_exhausted: bool
    stop_reason: str
    tokens: int
    lm_calls: int
    prm_calls: int
    score: float | None = None
    candidates: list = field(default_factory=list, repr=False)
    info: dict = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        """The solution's text ("" without one)."""
        return "" if self.solution is None else self.solution.text

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The solution's token ids, EOS excluded (``()`` without one; hook steps
        have none)."""
        return () if self.solution is None else self.solution.token_ids


# -- answers ------------------------------------------------------------------------

_NUM = r"-?\$?\d[\d,]*(?:\.\d+)?"
_HASH_RE = re.compile(r"####\s*(" + _NUM + ")")
_ANY_NUM_RE = re.compile(_NUM)


def _norm_number(s: str) -> str:
    s = s.replace(",", "").replace("$", "").strip()
    # exact decimals: through a float, 12345678901234567890 read as ...7168
    try:
        v = Decimal(s)
    except InvalidOperation:
        return s
    if not v.is_finite():
        return s
    if v == v.to_integral_value():
        return str(int(v))
    return format(v.normalize(), "f")


def extract_answer(text: str) -> str | None:
    """The final answer of a GSM8K-style solution: the number after the last
    ``####`` if there is one, else the last number in ``text``; normalised
    (commas and ``$`` removed, ``36.0`` -> ``"36"``). ``None`` if there is no number.

    Reference: the GSM8K answer format (Cobbe et al., 2021, "Training Verifiers to
    Solve Math Word Problems"), where the answer follows ``####``.
    """
    m = _HASH_RE.findall(text)
    if m:
        return _norm_number(m[-1])
    m = _ANY_NUM_RE.findall(text)
    return _norm_number(m[-1]) if m else None


# -- PRM helpers -------------------------------------------------------------------


def aggregate_scores(scores: Sequence[float], how: str = "last") -> float:
    """One value from per-prefix PRM scores: ``"last"`` (the score of the whole
    partial solution; Math-Shepherd, Wang et al. 2024), ``"min"`` or ``"prod"``
    (Lightman et al. 2023, "Let's Verify Step by Step"). 1.0 for no steps."""
    if how not in ("last", "min", "prod"):
        raise ValueError(f"unknown aggregate {how!r}; expected 'last', 'min' or 'prod'")
    if len(scores) == 0:
        return 1.0
    if how == "last":
        return float(scores[-1])
    if how == "min":
        return float(min(scores))
    if how == "prod":
        return float(np.prod(np.asarray(scores, dtype=np.float64)))
    raise ValueError(f"unknown aggregate {how!r}; expected 'last', 'min' or 'prod'")


def prm_score_last(prm, prompt: str, steps: Sequence[str], how: str = "last") -> float:
    """The aggregated PRM score of a partial solution, in [0, 1]. Uses
    ``prm.score_last`` when the PRM has it and ``how == "last"`` (cheaper for the
    LM judge), else aggregates ``prm.score(prompt, steps)``. Raises ``ValueError``
    on a score outside [0, 1] or a list of the wrong length. Reference: see
    :func:`aggregate_scores`."""
    steps = list(steps)
    if how == "last" and hasattr(prm, "score_last"):
        v = float(prm.score_last(prompt, steps))
    else:
        scores = [float(s) for s in prm.score(prompt, steps)]
        if len(scores) != len(steps):
            raise ValueError(f"the PRM returned {len(scores)} scores for {len(steps)} steps")
        # each score, not only the aggregate: min() passes a NaN that is not
        # first, and a product of 2.0 and 0.4 lands back in range
        bad = next((x for x in scores if not 0.0 <= x <= 1.0), None)
        if bad is not None:
            raise ValueError(f"PRM score {bad} is outside [0, 1]")
        v = aggregate_scores(scores, how)
    if not 0.0 <= v <= 1.0 or math.isnan(v):
        raise ValueError(f"PRM score {v} is outside [0, 1]")
    return v


# -- the shared step settings -------------------------------------------------------


@dataclass(frozen=True)
class StepOptions:
    """The step settings every reasoning driver shares (:func:`search.astar_search`,
    :func:`search.foresight_search`, :func:`search.best_of_n`), given once as
    ``options=`` instead of as keyword arguments of each call.

    Attributes:
        step_delimiter: the text that ends a step.
        max_step_tokens: the most tokens of one step (and of the answer line).
        temperature: step sampling temperature (0: greedy).
        seed: seeds the step sampler (``None``: fresh entropy).
        vocab: the vocabulary for decoding (default: the model's ``vocab``).
        prm_prompt: the problem text the PRM sees (default: the prompt string,
            or the decoded prompt ids).
        answer_fn: extracts the final answer from a solution's text.
    """

    step_delimiter: str = "\n"
    max_step_tokens: int = 64
    temperature: float = 0.7
    seed: object = None
    vocab: object = None
    prm_prompt: str | None = None
    answer_fn: Callable[[str], str | None] = extract_answer

    def replace(self, **changes) -> "StepOptions":
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def sampler(self, lm, prompt, constraint=None, *, rng=None,
                close_cutoff: bool = False) -> "LMStepSampler":
        """An :class:`LMStepSampler` with these settings (``rng``: default a
        generator seeded with :attr:`seed`)."""
        return LMStepSampler(lm, prompt, delimiter=self.step_delimiter, vocab=self.vocab,
                             constraint=constraint, temperature=self.temperature,
                             max_step_tokens=self.max_step_tokens,
                             rng=np.random.default_rng(self.seed) if rng is None else rng,
                             close_cutoff=close_cutoff)

    def prm_text(self, sampler: "LMStepSampler") -> str:
        """The problem text the PRM sees: :attr:`prm_prompt`, else the sampler's."""
        return self.prm_prompt if self.prm_prompt is not None else sampler.prompt_text


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<from options>"


#: the default of a driver's step-setting keywords: the value of ``options``
#: (a :class:`StepOptions`, default ``StepOptions()``)
UNSET = _Unset()


def step_options(driver: str, options: StepOptions | None, **keywords) -> StepOptions:
    """The step settings of a call of ``driver``: ``options``, or a
    :class:`StepOptions` of the ``keywords`` given (those not :data:`UNSET`).

    Raises:
        TypeError: ``options`` is not a :class:`StepOptions`, or a setting is
            given both ways (the message names them).
    """
    given = {name: value for name, value in keywords.items() if value is not UNSET}
    if options is None:
        return StepOptions(**given)
    if not isinstance(options, StepOptions):
        raise TypeError(f"{driver}: options must be a search.StepOptions, not {type(options).__name__}")
    if given:
        raise TypeError(f"{driver}: {', '.join(sorted(given))} given both as keyword arguments "
                        f"and in options=; give each once")
    return options


# -- step samplers -----------------------------------------------------------------


def _sample_index(logp: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A token id drawn from ``softmax(logp / temperature)`` (argmax at 0); ``-1``
    when every entry is ``-inf``."""
    if not np.isfinite(logp).any():
        return -1
    if temperature == 0:
        return int(np.argmax(logp))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        x = logp.astype(np.float64) / temperature
    top = np.max(x)
    if not np.isfinite(top):
        # a temperature so small that logp / T overflows: softmax's limit
        # (x - max was NaN everywhere, and the last id was drawn)
        return int(np.argmax(logp))
    x = np.exp(x - top)
    c = np.cumsum(x)
    i = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
    i = min(i, len(c) - 1)
    while x[i] == 0:  # rounding at an edge: step back to a possible token
        i -= 1
    return i


def _delimiter_ids(lm, vocab, delimiter: str) -> tuple[int, ...] | None:
    """Token ids spelling ``delimiter``: through the model's tokenizer if it has one
    (and it spells exactly those bytes), else a single vocabulary token with
    exactly those bytes; ``None`` if neither."""
    enc = getattr(lm, "encode", None)
    if enc is not None:
        ids = tuple(int(t) for t in enc(delimiter))
        if ids and vocab.decode(ids) == delimiter.encode():
            return ids
    want = delimiter.encode()
    for i, b in enumerate(vocab.tokens):
        if b == want and i not in vocab.eos_token_set:
            return (i,)
    return None


@dataclass
class _Stream:
    toks: list = field(default_factory=list)
    lps: list = field(default_factory=list)  # per kept token
    lp: float = 0.0
    eos_lp: float = 0.0
    spent: int = 0
    done: str | None = None  # "delim" | "eos" | "max" | "dead"
    ends: list = field(default_factory=list)  # token counts at which a step ended
    buf: bytes = b""


class LMStepSampler:
    """Samples steps (and roll-outs) from a model of the LM protocol (:mod:`search.lm.protocol`).

    Args:
        lm: the model; its token streams are :func:`search.lm.protocol.open_streams`
            (for a :class:`search.TransformersLM`: one batched forward pass per
            position over a shared KV cache; anything else: ``lm.logprobs``).
        prompt: the prompt's token ids, or a text turned into ids by
            ``lm.prompt_ids`` (the chat template for chat models); its text, for
            the PRMs, is :attr:`prompt_text`.
        delimiter: the text that ends a step; a step ends with the first token
            whose addition makes the step's bytes contain it (so a delimiter split
            over tokens is found too), provided the step has some non-whitespace
            text by then (blank lines join the next step).
        vocab: the :class:`constrain.Vocabulary` giving each token's bytes
            (default ``lm.vocab``).
        constraint: the answer-line constraint (module docstring), compiled
            against ``vocab``; ``None`` for none.
        temperature: sampling temperature (0: greedy).
        max_step_tokens: the most tokens of one step (a step cut there ends
            without the delimiter and is not final); the answer line gets as many,
            plus its EOS.
        rng: a ``numpy.random.Generator`` (or a seed).
        close_cutoff: with a constraint, a roll-out cut off by its token limit is
            closed with an answer line (as if it had ended there) instead of
            being dropped.

    Samples that share a prefix are drawn together: the prefix is scored once and
    the streams advance in lock-step, so ``lm.calls`` counts one row for the shared
    prefix plus one per further token (never the same prefix twice).
    """

    def __init__(self, lm, prompt: str | Sequence[int], *, delimiter: str = "\n", vocab=None, constraint=None,
                 temperature: float = 0.7, max_step_tokens: int = 64, rng=None, close_cutoff: bool = False):
        self.close_cutoff = bool(close_cutoff)
        self.lm = as_lm(lm)
        self.prompt = prompt_token_ids(self.lm, prompt)
        if not delimiter:
            raise ValueError("the step delimiter must be a non-empty string")
        self.delimiter = delimiter
        self.delim_bytes = delimiter.encode()
        self.vocab = vocab if vocab is not None else getattr(self.lm, "vocab", None)
        if self.vocab is None:
            raise ValueError("the model has no .vocab; pass vocab= (a constrain.Vocabulary)")
        #: the prompt as the PRMs see it: the text given, or the decoded ids
        self.prompt_text = prompt if isinstance(prompt, str) else self.decode(self.prompt)
        if not temperature >= 0 or temperature == float("inf"):  # NaN fails the first test
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
        if max_step_tokens < 1:
            raise ValueError(f"max_step_tokens must be >= 1, got {max_step_tokens}")
        self.temperature = float(temperature)
        self.max_step_tokens = int(max_step_tokens)
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.eos = frozenset(self.lm.eos_token_ids)
        self.constraint = constraint
        self._bytes: dict[int, bytes] = {}
        if constraint is not None:
            self.c_eos = constraint_eos_ids(self.lm, constraint)
            self.delim_ids = _delimiter_ids(self.lm, self.vocab, delimiter)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of token ids (EOS and special ids skipped)."""
        return self.vocab.decode([int(t) for t in ids]).decode("utf-8", errors="replace")

    def _tok_bytes(self, t: int) -> bytes:
        b = self._bytes.get(t)
        if b is None:
            b = self.vocab.decode([t]) if t < len(self.vocab) else b""
            self._bytes[t] = b
        return b

    def _has_text(self, toks: list[int], ends: list[int]) -> bool:
        start = ends[-1] if ends else 0
        return bool(b"".join(self._tok_bytes(t) for t in toks[start:]).strip())

    def _streams(self, head: tuple[int, ...], n: int, budget: Budget, *, until_delim: bool,
                 max_tokens: int) -> list[_Stream]:
        """``n`` token streams after ``head``, in lock-step, each until EOS, the
        delimiter (``until_delim``) or ``max_tokens``. A stream refused a token by
        the budget is ``"dead"``. Step boundaries are recorded in ``ends``."""
        streams = [_Stream() for _ in range(n)]
        if n == 0 or max_tokens <= 0 or budget.tokens_left() <= 0:
            for s in streams:
                s.done = "dead" if budget.tokens_left() <= 0 else "max"
            if budget.tokens_left() <= 0:
                budget.exhausted = budget.exhausted or "token_budget"
            return streams
        dl = len(self.delim_bytes)
        handle, rows = open_streams(self.lm, head, n)
        live = list(range(n))
        while True:
            nxt_idx, nxt_tok = [], []
            for j, i in enumerate(live):
                s = streams[i]
                if not budget.take_token():
                    s.done = "dead"
                    continue
                s.spent += 1
                row = rows[j]
                t = _sample_index(row, self.temperature, self.rng)
                if t < 0:
                    s.done = "dead"
                    continue
                s.lp += float(row[t])
                if t in self.eos:
                    s.done, s.eos_lp = "eos", float(row[t])
                    continue
                s.toks.append(t)
                s.lps.append(float(row[t]))
                tb = self._tok_bytes(t)
                tail = s.buf[-(dl - 1):] if dl > 1 else b""
                s.buf = (tail + tb)[-dl:]
                # a step needs some text: blank lines stay in the step that follows
                if self.delim_bytes in tail + tb and self._has_text(s.toks, s.ends):
                    s.ends.append(len(s.toks))
                    s.buf = b""
                    if until_delim:
                        s.done = "delim"
                        continue
                if len(s.toks) >= max_tokens:
                    s.done = "max"
                    continue
                nxt_idx.append(i)
                nxt_tok.append(t)
            # score only rows the budget can still use (the first streams get tokens first)
            left = budget.tokens_left()
            if left < len(nxt_idx):
                for i in nxt_idx[int(left):]:
                    streams[i].done = "dead"
                budget.exhausted = budget.exhausted or "token_budget"
                nxt_idx, nxt_tok = nxt_idx[: int(left)], nxt_tok[: int(left)]
            if not nxt_idx:
                return streams
            rows = handle.advance(nxt_idx, nxt_tok)
            live = nxt_idx

    def sample(self, prefixes: Sequence[Solution], budget: Budget) -> list[Step | None]:
        """One new step after each of ``prefixes`` (equal prefixes are sampled
        together). An entry is ``None`` when the step could not be finished: the
        token budget ran out (``budget.exhausted`` is then set), the model allowed
        no token, or the answer line was cut off. Never exceeds ``budget``."""
        out: list[Step | None] = [None] * len(prefixes)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prefixes):
            groups.setdefault(p.token_ids, []).append(i)
        for key, idx in groups.items():
            streams = self._streams(self.prompt + key, len(idx), budget, until_delim=True,
                                    max_tokens=self.max_step_tokens)
            for i, s in zip(idx, streams):
                if s.done == "dead":
                    continue
                step = Step(self.decode(s.toks), tuple(s.toks), s.lp, s.done == "eos", s.spent)
                if step.final and self.constraint is not None:
                    step = self.answer_line(prefixes[i], step, budget, s.eos_lp)
                out[i] = step
        return out

    def rollouts(self, prefix: Solution, n: int, budget: Budget, max_tokens: int) -> list[Solution | None]:
        """``n`` continuations of ``prefix`` to the end (EOS), sampled together in
        one stream each and split into steps at the delimiters; the final step
        gets its answer line under the constraint. ``None`` for a roll-out that
        did not end within ``max_tokens`` (unless ``close_cutoff``) or the budget."""
        streams = self._streams(self.prompt + prefix.token_ids, n, budget, until_delim=False,
                                max_tokens=max_tokens)
        out: list[Solution | None] = []
        for s in streams:
            closing = s.done == "max" and self.close_cutoff and self.constraint is not None and s.toks
            if s.done != "eos" and not closing:
                out.append(None)
                continue
            cuts = [0] + [e for e in s.ends if e < len(s.toks)] + [len(s.toks)]
            sol = prefix
            for a, b in zip(cuts[:-1], cuts[1:]):
                last = b == len(s.toks)
                if a == b and not last:
                    continue
                toks = tuple(s.toks[a:b])
                lp = float(sum(s.lps[a:b])) + (s.eos_lp if last else 0.0)
                spent = len(toks) + (1 if last and s.done == "eos" else 0)
                sol = sol.extend(Step(self.decode(toks), toks, lp, last, spent))
            if self.constraint is not None:
                fixed = self.answer_line(Solution(sol.steps[:-1]), sol.steps[-1], budget, s.eos_lp)
                if fixed is None:
                    out.append(None)
                    continue
                sol = Solution(sol.steps[:-1] + (fixed,))
            out.append(sol)
        return out

    def answer_line(self, prefix: Solution, step: Step, budget: Budget, eos_lp: float) -> Step | None:
        """``step`` (the last step after ``prefix``) as a valid final step: itself if
        the constraint accepts its tokens, else its text, the delimiter and an
        answer line generated under the constraint (``eos_lp``: the
        log-probability of the EOS the step sampled, which the answer line
        replaces; 0 for a step that did not end). ``None`` when the budget or
        ``max_step_tokens`` cut the answer line off, or the model allowed no
        token."""
        c = self.constraint
        # the answer is a line of its own: after the prompt, or after a step
        # that ended with the delimiter (a step cut at max_step_tokens did not)
        if self.delim_ids is None:
            line_start = True
        else:
            before = step.token_ids or prefix.token_ids
            line_start = not before or self._tok_bytes(before[-1]).endswith(self.delim_bytes)
        if step.token_ids and c.accepts_tokens(step.token_ids) and (
                self.delim_ids is None or not prefix.token_ids
                or self._tok_bytes(prefix.token_ids[-1]).endswith(self.delim_bytes)):
            return step
        keep = list(step.token_ids)
        spent = step.n_tokens
        if not line_start:
            if not budget.take_token(len(self.delim_ids)):
                return None
            keep += self.delim_ids
            spent += len(self.delim_ids)
        # the EOS the free step sampled is replaced by the answer line: drop its log-probability
        lp = step.logprob - eos_lp
        head = self.prompt + prefix.token_ids + tuple(keep)
        ans: list[int] = []
        state = c.initial_state()
        V = self.lm.vocab_size
        handle = None
        for _ in range(self.max_step_tokens + 1):  # the answer line's tokens and its EOS
            if not budget.take_token():
                return None
            if handle is None:
                handle, rows = open_streams(self.lm, head, 1)
            else:
                rows = handle.advance([0], [ans[-1]])
            row = rows[0]
            spent += 1
            ids = np.asarray(c.allowed_token_ids(state), dtype=np.int64)
            ids = ids[ids < V]
            masked = np.full(V, -np.inf)
            masked[ids] = row[ids]
            accepting = bool(c.is_accepting(state))
            if accepting:
                # the answer is a line: once it is complete, ending the line ends it too
                ends = self._line_end_ids()
                masked[ends] = row[ends]
            t = _sample_index(masked, self.temperature, self.rng)
            if t < 0:
                return None
            lp += float(row[t])
            if t in self.c_eos or (accepting and t in self._line_end_set):
                return Step(self.decode(keep + ans), tuple(keep + ans), lp, True, spent)
            state = c.advance(state, t)
            if state is None:  # the mask allowed it: a constraint bug
                raise RuntimeError(f"constraint refused token {t} that it allowed")
            ans.append(t)
        return None

    def _line_end_ids(self) -> np.ndarray:
        """Ids of the tokens whose bytes contain the delimiter (cached)."""
        if not hasattr(self, "_line_ends"):
            d = self.delim_bytes
            V = min(self.lm.vocab_size, len(self.vocab))
            self._line_ends = np.array([i for i in range(V) if self.vocab.tokens[i] and d in self.vocab.tokens[i]
                                        and i not in self.c_eos], dtype=np.int64)
            self._line_end_set = frozenset(self._line_ends.tolist())
        return self._line_ends

    def rollout(self, prefix: Solution, budget: Budget, max_steps: int) -> Solution | None:
        """``prefix`` continued to a final step in one stream of at most
        ``max_step_tokens`` tokens per remaining step (``max_steps`` in all);
        ``None`` if it did not end."""
        room = max(0, max_steps - len(prefix.steps)) * self.max_step_tokens
        return self.rollouts(prefix, 1, budget, room)[0]


class HookStepSampler:
    """Steps given by a function instead of a model, for toy step trees and tests.

    ``expand(step_texts: tuple[str, ...])`` returns the children of a partial
    solution as ``(text, cost, final)`` tuples (or :class:`Step` objects). Each
    child counts ``Step.n_tokens`` tokens (1 for a tuple); children are taken in
    order while the token budget allows.
    """

    def __init__(self, expand: Callable):
        self.expand = expand

    def children(self, prefix: Solution, budget: Budget) -> list[Step]:
        """The children of ``prefix`` that the budget allows (``budget.exhausted``
        is set when it cut some off)."""
        out = []
        for ch in self.expand(tuple(s.text for s in prefix.steps)):
            step = ch if isinstance(ch, Step) else Step(str(ch[0]), cost=float(ch[1]),
                                                        final=bool(ch[2]) if len(ch) > 2 else False)
            if not budget.take_token(step.n_tokens):
                break
            out.append(step)
        return out
