"""Process reward models (PRMs): scores of partial solutions.

The protocol is one method::

    prm.score(prompt: str, steps: list[str]) -> list[float]

returning, for ``i = 1 .. len(steps)``, a score in [0, 1] of the partial solution
``steps[:i]`` (an estimate of the probability that it is on a correct path). A PRM
may also have ``score_last(prompt, steps) -> float`` (the score of the whole of
``steps``) when that is cheaper; the searches use it then. Every adapter here
counts its ``score``/``score_last`` invocations in ``.calls``.

Adapters:

* :class:`HFStepPRM` — a Hugging Face PRM in the format of the public math PRMs:
  each step followed by a step-tag token, the score at a tag the probability of
  the positive label there (Math-Shepherd: softmax over the ``+``/``-`` tokens of
  a causal LM's logits, Wang et al., ACL 2024; Qwen2.5-Math-PRM style: a 2-label
  token-classification head, Zhang et al. 2025).
* :class:`LMJudgePRM` — the language model as its own judge: the probability of
  "Yes" (against "No") to a verification prompt about the partial solution
  (cf. Zheng et al., NeurIPS 2023, "Judging LLM-as-a-judge").
* :class:`CallablePRM` — any Python function of ``(prompt, steps)``.
* :class:`ArithmeticCheckerPRM` — checks the arithmetic written in the steps
  (``12 * 3 = 36``, GSM8K's calculator annotations ``<<12*3=36>>``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from typing import Callable, Sequence

import numpy as np

__all__ = ["PRM", "HFStepPRM", "LMJudgePRM", "CallablePRM", "ArithmeticCheckerPRM", "check_arithmetic"]


class PRM:
    """Base of the adapters: ``score_last`` from ``score`` and a call counter.

    Subclasses implement :meth:`score`."""

    calls: int = 0

    def score(self, prompt: str, steps: Sequence[str]) -> list[float]:  # pragma: no cover - abstract
        """One score in [0, 1] per prefix ``steps[:1], steps[:2], ...``."""
        raise NotImplementedError

    def score_last(self, prompt: str, steps: Sequence[str]) -> float:
        """The score of the whole partial solution ``steps`` (1.0 for no steps);
        equal to ``score(prompt, steps)[-1]``."""
        if not steps:
            return 1.0
        return float(self.score(prompt, steps)[-1])


# -- Hugging Face step-tag PRMs ------------------------------------------------------


class HFStepPRM(PRM):
    """A Hugging Face PRM that reads a score at a step-tag token after each step.

    The input is ``prompt + " " + "\\n".join(step + " " + step_tag)`` (the
    Math-Shepherd layout; ``template`` and ``step_join`` change it), tokenised by
    ``tokenizer``; one forward pass of ``model`` gives the logits at every position
    holding the step tag's id. The score there is

    * for a causal-LM head (last logit dimension = vocabulary): the softmax over
      the logits of ``good_token`` and ``bad_token`` only, taken at ``good_token``
      (Math-Shepherd's ``+``/``-``);
    * for a token-classification head with two labels (last dimension 2): the
      softmax over the two labels, taken at ``positive_label``.

    Args:
        model: a ``transformers`` model (causal LM or token classification); it is
            only run forward, in inference mode, on its own device.
        tokenizer: its tokenizer (callable on a string, or with ``encode``).
        step_tag: the text of the step-tag token; it must encode to exactly one
            token. Occurrences inside a step's text are removed first, and those in
            the prompt are told apart (the prompt's own text is kept), so that the
            tags read are exactly the appended ones.
        good_token, bad_token: texts of the label tokens (causal-LM head); each must
            encode to one token.
        positive_label: the label index of "correct" (classification head).

    Guarantee: ``len(score(p, s)) == len(s)``, each value in [0, 1]; and, the model
    being causal, ``score(p, s[:i]) == score(p, s)[:i]`` up to float rounding.
    One ``score`` call is one forward pass and counts one in :attr:`calls`.
    Reference: Wang et al., "Math-Shepherd: Verify and Reinforce LLMs
    Step-by-step without Human Annotations", ACL 2024.
    """

    def __init__(self, model, tokenizer, *, step_tag: str = "ки", good_token: str = "+", bad_token: str = "-",
                 positive_label: int = 1, template: str = "{prompt} {steps}", step_join: str = "\n"):
        self.model = model.eval() if hasattr(model, "eval") else model
        self.tokenizer = tokenizer
        self.step_tag = step_tag
        self.template = template
        self._prompt_first = template.find("{prompt}") <= template.find("{steps}")
        self.step_join = step_join
        self.positive_label = int(positive_label)
        self.tag_id = self._one_id(step_tag, "step_tag")
        self.good_id = self._one_id(good_token, "good_token")
        self.bad_id = self._one_id(bad_token, "bad_token")
        self.calls = 0

    def _encode(self, text: str) -> list[int]:
        tok = self.tokenizer
        if hasattr(tok, "encode"):
            try:
                return list(tok.encode(text, add_special_tokens=False))
            except TypeError:  # a raw tokenizers.Tokenizer returns an Encoding
                enc = tok.encode(text)
                return list(getattr(enc, "ids", enc))
        return list(tok(text)["input_ids"])

    def _one_id(self, text: str, what: str) -> int:
        ids = self._encode(text)
        if len(ids) != 1:
            raise ValueError(f"{what} {text!r} encodes to {len(ids)} tokens ({ids}); it must be exactly one")
        return int(ids[0])

    def build_input(self, prompt: str, steps: Sequence[str]) -> str:
        """The text fed to the model: every step followed by ``" " + step_tag``."""
        clean = [s.replace(self.step_tag, "").strip() for s in steps]
        body = self.step_join.join(f"{s} {self.step_tag}" for s in clean)
        return self.template.format(prompt=prompt, steps=body)

    def score(self, prompt: str, steps: Sequence[str]) -> list[float]:
        """The probability of the positive label at each step tag (see the class
        docstring); one forward pass."""
        import torch

        self.calls += 1
        if not steps:
            return []
        ids = self._encode(self.build_input(prompt, steps))
        device = getattr(self.model, "device", None)
        x = torch.tensor([ids], dtype=torch.long, device=device)
        with torch.inference_mode():
            logits = self.model(input_ids=x).logits[0].float()
        pos = [i for i, t in enumerate(ids) if t == self.tag_id]
        # the prompt may hold the tag's text ("ки" is a Russian syllable): those
        # tags are not the appended ones (every call raised here)
        in_prompt = self._encode(prompt).count(self.tag_id) if self.step_tag in prompt else 0
        if len(pos) != len(steps) + in_prompt:
            raise ValueError(f"found {len(pos) - in_prompt} step tags for {len(steps)} steps; does the "
                             f"tokenizer merge {self.step_tag!r} with its neighbours?")
        if in_prompt:
            pos = pos[in_prompt:] if self._prompt_first else pos[:len(steps)]
        at = logits[pos]
        if at.shape[-1] == 2:
            probs = torch.softmax(at, dim=-1)[:, self.positive_label]
        else:
            pair = at[:, [self.good_id, self.bad_id]]
            probs = torch.softmax(pair, dim=-1)[:, 0]
        return [float(p) for p in probs.cpu()]

    def score_last(self, prompt: str, steps: Sequence[str]) -> float:
        """``score(prompt, steps)[-1]`` (one forward pass gives every tag)."""
        if not steps:
            return 1.0
        return self.score(prompt, steps)[-1]


# -- the LM as its own judge -----------------------------------------------------------

DEFAULT_JUDGE_TEMPLATE = (
    "Problem:\n{prompt}\n\nPartial solution:\n{steps}\n\n"
    "Is every step of this partial solution correct? Answer Yes or No."
)


class LMJudgePRM(PRM):
    """The language model as a step verifier: the score of ``steps[:i]`` is
    ``P(yes) / (P(yes) + P(no))`` for the next token after a verification prompt,
    where ``P(yes)`` sums the probabilities of the first tokens of ``yes_words``
    (``"Yes"``, ``" Yes"``, ``"yes"``) and likewise for ``no_words``.

    Args:
        lm: a :class:`search.TransformersLM` (its chat template is used when it has
            one), or any object of the LM protocol together with ``encode``.
        template: the verification prompt; ``{prompt}`` and ``{steps}`` (the steps
            joined by newlines) are filled in.
        encode: ``str -> list[int]`` for models without ``prompt_ids``.
        yes_words, no_words: the answer words.

    Guarantee: scores in [0, 1] (0.5 when the model gives both words no mass); one
    model call (``lm.calls`` + 1) per prefix scored; ``score_last`` scores only the
    whole partial solution. ``calls`` counts ``score``/``score_last`` invocations.
    Reference: Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and Chatbot
    Arena", NeurIPS 2023 (the model as its own judge).
    """

    def __init__(self, lm, *, template: str = DEFAULT_JUDGE_TEMPLATE, encode: Callable | None = None,
                 yes_words: Sequence[str] = ("Yes", " Yes", "yes"), no_words: Sequence[str] = ("No", " No", "no")):
        from search.lm.protocol import as_lm

        self.raw = lm
        self.lm = as_lm(lm)
        self.template = template
        self._prompt_ids = getattr(self.lm, "prompt_ids", None)
        self._encode = encode or getattr(self.lm, "encode", None)
        if self._prompt_ids is None and self._encode is None:
            raise TypeError("LMJudgePRM needs a model with prompt_ids()/encode() or an encode= function")
        self.yes_ids = sorted({self._first_id(w) for w in yes_words})
        self.no_ids = sorted({self._first_id(w) for w in no_words})
        if set(self.yes_ids) & set(self.no_ids):
            raise ValueError("the yes and no words share a first token")
        self.calls = 0

    def _first_id(self, word: str) -> int:
        ids = list(self._encode(word)) if self._encode is not None else []
        if not ids:
            raise ValueError(f"cannot encode {word!r}")
        return int(ids[0])

    def _ids(self, text: str) -> list[int]:
        if self._prompt_ids is not None:
            return list(self._prompt_ids(text))
        return list(self._encode(text))

    def _judge(self, prompt: str, steps: Sequence[str]) -> float:
        text = self.template.format(prompt=prompt, steps="\n".join(s.strip() for s in steps))
        row = np.asarray(self.lm.logprobs([tuple(self._ids(text))])[0], dtype=np.float64)
        yes = float(np.exp(row[self.yes_ids]).sum())
        no = float(np.exp(row[self.no_ids]).sum())
        if yes + no <= 0 or not math.isfinite(yes + no):
            return 0.5
        return yes / (yes + no)

    def score(self, prompt: str, steps: Sequence[str]) -> list[float]:
        """The judge's P(yes) for every prefix of ``steps`` (one model call each)."""
        self.calls += 1
        return [self._judge(prompt, steps[: i + 1]) for i in range(len(steps))]

    def score_last(self, prompt: str, steps: Sequence[str]) -> float:
        """The judge's P(yes) for the whole of ``steps`` (one model call)."""
        self.calls += 1
        return self._judge(prompt, steps) if steps else 1.0


# -- Python callables -------------------------------------------------------------------


class CallablePRM(PRM):
    """A PRM from a function ``fn(prompt, steps) -> float`` that scores a whole
    partial solution; ``score`` calls it on every prefix (``per_prefix=True``,
    default), or ``fn`` returns the full list itself (``per_prefix=False``).

    Guarantee: values are clipped to [0, 1]; a NaN raises ``ValueError``.
    ``calls`` counts ``score``/``score_last`` invocations. Reference: the PRM
    interface of Lightman et al., "Let's Verify Step by Step" (2023): one score
    per step prefix."""

    def __init__(self, fn: Callable, *, per_prefix: bool = True):
        self.fn = fn
        self.per_prefix = bool(per_prefix)
        self.calls = 0

    @staticmethod
    def _clip(v) -> float:
        v = float(v)
        if math.isnan(v):
            raise ValueError("the PRM function returned NaN")
        return min(1.0, max(0.0, v))

    def score(self, prompt: str, steps: Sequence[str]) -> list[float]:
        """``fn`` on every prefix of ``steps`` (or ``fn``'s own list), clipped to [0, 1]."""
        self.calls += 1
        steps = list(steps)
        if self.per_prefix:
            return [self._clip(self.fn(prompt, steps[: i + 1])) for i in range(len(steps))]
        out = [self._clip(v) for v in self.fn(prompt, steps)]
        if len(out) != len(steps):
            raise ValueError(f"the PRM function returned {len(out)} scores for {len(steps)} steps")
        return out

    def score_last(self, prompt: str, steps: Sequence[str]) -> float:
        """``fn(prompt, steps)`` alone when it scores one prefix at a time."""
        if not steps:
            return 1.0
        if not self.per_prefix:
            return self.score(prompt, steps)[-1]
        self.calls += 1
        return self._clip(self.fn(prompt, list(steps)))


# -- arithmetic checker ---------------------------------------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUMBER = r"\$?\d[\d,]*(?:\.\d+)?%?"
_CALC_RE = re.compile(r"<<([^<>=]+)=([^<>=]+)>>")
_OPERAND = r"\(*\s*-?" + _NUMBER + r"\s*\)*"
#: a prose claim's ``= result``, and its left side ending right before it
_RESULT_RE = re.compile(r"=\s*(-?\$?\d[\d,]*(?:\.\d+)?)(?![\d])")
_LHS_RE = re.compile(
    r"(?<![\w.,])(" + _OPERAND + r"(?:\s*[-+*/×x÷]\s*" + _OPERAND + r")+)\s*\Z")
#: the longest left side of a claim looked at (characters): a scan of every
#: start position to the end of a long chain was quadratic (a 16,000-term
#: ``1+1+...`` took 28 s), and evaluating one recursed past Python's limit
MAX_CLAIM_CHARS = 200


def _prose_claims(text: str) -> list[tuple[str, str]]:
    """``(expression, result)`` of each ``a op b [op c ...] = result`` in
    ``text``, left to right, not overlapping; a left side of more than
    :data:`MAX_CLAIM_CHARS` characters is no claim (it was a suffix of one)."""
    out = []
    done = 0
    for m in _RESULT_RE.finditer(text):
        eq = m.start()
        if eq < done:
            continue
        lo = max(done, eq - MAX_CLAIM_CHARS)
        lhs = _LHS_RE.search(text, lo, eq)
        if lhs is None or (lhs.start() == lo and lo > done and lo > 0):
            continue
        out.append((lhs.group(1), m.group(1)))
        done = m.end()
    return out


def _eval_expr(expr: str) -> float | None:
    """The value of an arithmetic expression of numbers, + - * / (also × x ÷),
    parentheses and percentages; ``None`` if it is anything else."""
    if len(expr) > 4 * MAX_CLAIM_CHARS:
        return None  # a calculator annotation past any real claim's size
    e = expr.replace("×", "*").replace("÷", "/").replace("$", "").replace(",", "")
    e = re.sub(r"(?<=[\d)\s])x(?=[\s\d(])", "*", e)
    e = re.sub(r"(\d+(?:\.\d+)?)%", r"(\1/100)", e)
    try:
        tree = ast.parse(e.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return float(n.value)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        raise ValueError("not arithmetic")

    try:
        v = ev(tree)
    except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return v if math.isfinite(v) else None


def _parse_number(s: str) -> tuple[float, int] | None:
    """``(value, decimals)`` of a written number (``$1,200.50`` -> (1200.5, 2))."""
    t = s.strip().replace("$", "").replace(",", "").rstrip("%").strip()
    if not re.fullmatch(r"-?\d+(?:\.\d+)?", t):
        return None
    dec = len(t.split(".")[1]) if "." in t else 0
    return float(t), dec


def _equal(value: float, written: tuple[float, int]) -> bool:
    r, dec = written
    if abs(value - r) <= 1e-6 * max(1.0, abs(value)):
        return True
    if dec == 0:
        return False
    # a result written rounded or truncated to its decimals (10/3 = 3.33) is right
    scale = 10.0 ** dec
    return abs(round(value, dec) - r) < 0.5 / scale or abs(math.trunc(value * scale) / scale - r) < 0.5 / scale


def check_arithmetic(text: str) -> tuple[int, int]:
    """``(correct, wrong)``: the number of arithmetic claims in ``text`` that hold
    and that do not. A claim is a calculator annotation ``<<expr=result>>`` or, in
    the prose (annotations removed), ``a op b [op c ...] = result`` with numbers,
    ``+ - * / × x ÷``, parentheses, ``$``, thousands commas and ``%``. A result
    rounded or truncated to the decimals it is written with counts as correct.
    Claims that do not parse are ignored. Reference: the ``<<expr=result>>``
    calculator annotations of GSM8K (Cobbe et al., 2021)."""
    correct = wrong = 0
    claims = _CALC_RE.findall(text) + _prose_claims(_CALC_RE.sub(" ", text))
    for lhs, rhs in claims:
        v, w = _eval_expr(lhs), _parse_number(rhs)
        if v is None or w is None:
            continue
        if _equal(v, w):
            correct += 1
        else:
            wrong += 1
    return correct, wrong


class ArithmeticCheckerPRM(PRM):
    """A rule-based PRM that checks the arithmetic of a partial solution.

    The score of ``steps[:i]`` counts the claims of those steps, each step's
    text checked on its own (see :func:`check_arithmetic`; a claim split
    across two steps, ``12 * 3`` then ``= 35``, is none): ``wrong_score`` if
    any claim is wrong, else ``correct_score`` if at least one claim was
    checked, else ``neutral_score``.
    A wrong step therefore keeps every longer prefix low, which is what a PRM's
    "is this partial solution still on a correct path" means.

    Guarantee: scores in [0, 1] given scores in [0, 1]; no model, deterministic;
    ``calls`` counts ``score``/``score_last`` invocations. Reference: the
    calculator annotations of GSM8K (Cobbe et al., 2021); rule-based outcome
    checks as verifiers (Lightman et al., 2023, compare PRMs with such checks).
    """

    def __init__(self, *, correct_score: float = 1.0, wrong_score: float = 0.05, neutral_score: float = 0.5):
        for v in (correct_score, wrong_score, neutral_score):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"scores must be in [0, 1], got {v}")
        self.correct_score = float(correct_score)
        self.wrong_score = float(wrong_score)
        self.neutral_score = float(neutral_score)
        self.calls = 0

    def score(self, prompt: str, steps: Sequence[str]) -> list[float]:
        """The verdict on every prefix of ``steps`` (cumulative: one wrong claim
        makes every later prefix wrong)."""
        self.calls += 1
        out, c_tot, w_tot = [], 0, 0
        for s in steps:
            c, w = check_arithmetic(s)
            c_tot, w_tot = c_tot + c, w_tot + w
            out.append(self.wrong_score if w_tot else (self.correct_score if c_tot else self.neutral_score))
        return out

    def score_last(self, prompt: str, steps: Sequence[str]) -> float:
        """``score(prompt, steps)[-1]`` (1.0 for no steps)."""
        if not steps:
            return 1.0
        return self.score(prompt, steps)[-1]
