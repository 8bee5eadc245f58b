"""vLLM as the model of the search drivers: :class:`VLLMLM`.

:class:`VLLMLM` puts the LM protocol (:mod:`search.lm.protocol`) over a vLLM
``LLM``: ``logprobs(prefixes)`` sends every prefix of the call as one request of
one new token, so that vLLM batches them and its prefix cache (automatic prefix
caching, by KV block) serves the starts they share with each other and with
earlier calls; the engine returns the next-token log-probabilities with the
request.

What a row holds, and which drivers that serves:

* ``top_logprobs=None`` (the default): the **whole distribution** (vLLM's
  ``logprobs=-1``; the engine needs ``max_logprobs=-1``). Every driver is then
  exactly what it is on :class:`search.TransformersLM` — beam, best-first beam,
  lattice, A*, foresight, best-of-n and SMC (whose proposals sample from, or
  renormalise over, the whole row), with or without a constraint — up to the
  engine's numerics.
* ``top_logprobs=K``: the ``K`` most likely tokens, the rest ``-inf`` (cheaper:
  ``K`` numbers a row cross the engine's process boundary instead of the
  vocabulary). Exact for greedy decoding and for unconstrained beam and
  best-first beam search with ``beam_size <= K`` (no hypothesis outside a
  parent's ``K`` best children can enter a beam of ``K``). Under a constraint,
  or for drivers that sample or renormalise (best-of-n, SMC, AWRS), a row cut to
  ``K`` changes the answer: use the whole distribution there.

Constraints are applied by the drivers to these rows through the compiled
constraint's own protocol, as on any model; :meth:`VLLMLM.generate` runs
constrained generation inside vLLM instead (its structured outputs, on the
Trellis backend when the engine was started with it), for what needs whole
sequences rather than scores.

``lm.calls`` counts prefixes scored, as everywhere; ``lm.tokens_computed`` the
prompt tokens vLLM did not find in its prefix cache (its ``num_cached_tokens``
of each request).

Example (in the vLLM environment, ``bash .ci/setup-vllm``)::

    from search.lm.vllm import VLLMLM
    import search
    lm = VLLMLM.from_model("path/to/model", dtype="float32")
    best = search.beam_search(lm, "Name a colour.", beam_size=5, max_new_tokens=8)
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from search.lm.text import TokenizerText, eos_ids

__all__ = ["VLLMLM"]

#: engine settings :meth:`VLLMLM.from_model` starts with: whole-distribution
#: rows, and prefix caching by blocks of 32 tokens (the smallest block the CPU
#: build runs at full speed; with a block longer than most prompts nothing would
#: be shared)
SEARCH_ENGINE_KWARGS = dict(max_logprobs=-1, enable_prefix_caching=True, block_size=32)


class VLLMLM(TokenizerText):
    """The LM protocol over a vLLM ``LLM`` (see the module docstring).

    Args:
        llm: a ``vllm.LLM``. For whole-distribution rows it must have been made
            with ``max_logprobs=-1``; :meth:`from_model` makes one so.
        top_logprobs: ``None`` for the whole distribution, or how many of the
            most likely tokens each row keeps (the rest ``-inf``).
        eos_token_ids: ids that end a hypothesis; default: the tokenizer's EOS
            plus the model's generation config's.
        name: a label for messages.

    One thread at a time: a vLLM ``LLM`` is not safe to call from several
    threads (a server shares an engine through vLLM's own API server instead).
    """

    def __init__(self, llm, *, top_logprobs: int | None = None,
                 eos_token_ids: Iterable[int] | None = None, name: str | None = None):
        self.llm = llm
        model_config = llm.llm_engine.model_config
        self.name = name or str(model_config.model)
        self.vocab_size = int(model_config.get_vocab_size())
        self.tokenizer = llm.get_tokenizer()
        if top_logprobs is not None and int(top_logprobs) < 1:
            raise ValueError(f"top_logprobs must be None or at least 1, not {top_logprobs}")
        self.top_logprobs = None if top_logprobs is None else int(top_logprobs)
        limit = int(model_config.max_logprobs)
        if self.top_logprobs is None and limit != -1:
            raise ValueError(
                f"{self.name}: whole-distribution rows need an engine made with max_logprobs=-1 "
                f"(this one allows {limit}); make it with VLLMLM.from_model, or pass top_logprobs=K")
        if self.top_logprobs is not None and limit != -1 and self.top_logprobs > limit:
            raise ValueError(f"{self.name}: top_logprobs={self.top_logprobs} is above the engine's "
                             f"max_logprobs={limit}")
        gen = model_config.try_get_generation_config() or {}
        self.eos_token_ids: tuple[int, ...] = eos_ids(self.name, self.tokenizer, eos_token_ids,
                                                      gen.get("eos_token_id"))
        #: prefixes scored so far (every row counts, as in the LM protocol)
        self.calls = 0
        #: prompt tokens the engine computed (not found in its prefix cache)
        self.tokens_computed = 0
        self._vocab = None

    @classmethod
    def from_model(cls, model: str, *, top_logprobs: int | None = None, **engine_kwargs) -> "VLLMLM":
        """A :class:`VLLMLM` over a new ``vllm.LLM(model, **engine_kwargs)``, with
        :data:`SEARCH_ENGINE_KWARGS` as defaults (whole-distribution rows,
        prefix caching by blocks of 32 tokens)."""
        from vllm import LLM

        kwargs = {**SEARCH_ENGINE_KWARGS, **engine_kwargs}
        return cls(LLM(model=model, **kwargs), top_logprobs=top_logprobs)

    def close(self) -> None:
        """Shut the engine down (its engine-core process too); the model is
        unusable afterwards. An engine left running can keep the interpreter
        from exiting."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown(timeout=30)

    def __repr__(self) -> str:
        rows = "whole rows" if self.top_logprobs is None else f"top {self.top_logprobs}"
        return f"VLLMLM({self.name!r}, vocab_size={self.vocab_size}, {rows})"

    @property
    def eos_token_id(self) -> int:
        """The first (smallest) EOS id."""
        return self.eos_token_ids[0]

    # -- scoring ----------------------------------------------------------------

    def _params(self, **kw):
        from vllm import SamplingParams

        k = -1 if self.top_logprobs is None else self.top_logprobs
        return SamplingParams(max_tokens=1, temperature=0.0, logprobs=k, flat_logprobs=True,
                              detokenize=False, **kw)

    def logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """Next-token log-probabilities after each prefix: a float32 array
        ``(len(prefixes), vocab_size)``, ``-inf`` outside a row's top
        ``top_logprobs`` when that is set. All prefixes go to the engine as one
        batch of one-token requests. Counts ``len(prefixes)`` calls."""
        keys = [[int(t) for t in p] for p in prefixes]
        out = np.full((len(keys), self.vocab_size), -np.inf, dtype=np.float32)
        if not keys:
            return out
        if not all(keys):
            raise ValueError("cannot score an empty prefix")
        results = self.llm.generate([{"prompt_token_ids": k} for k in keys], self._params(), use_tqdm=False)
        for i, (k, res) in enumerate(zip(keys, results)):
            lp = res.outputs[0].logprobs
            start, end = lp.start_indices[0], lp.end_indices[0]
            ids = np.asarray(lp.token_ids[start:end], dtype=np.int64)
            vals = np.asarray(lp.logprobs[start:end], dtype=np.float32)
            keep = ids < self.vocab_size
            out[i, ids[keep]] = vals[keep]
            self.tokens_computed += len(k) - int(res.num_cached_tokens or 0)
        self.calls += len(keys)
        return out

    # -- whole sequences inside the engine -------------------------------------------

    def generate(self, prompts: Sequence, *, constraint: dict | Sequence[dict] | None = None,
                 max_new_tokens: int = 256,
                 temperature: float = 0.0, n: int = 1, seed: int | None = None) -> list[list[tuple]]:
        """Generate inside vLLM: for each prompt (text, through :meth:`prompt_ids`,
        or ids) ``n`` completions as ``(token ids, cumulative log-probability)``.
        ``constraint`` is a vLLM structured-outputs request
        (``{"json": schema}``, ``{"regex": ...}``, ``{"grammar": ...}``,
        ``{"structural_tag": ...}``; a structural tag may be given as a dict),
        or a list of them, one per prompt; it is enforced by the engine's
        structured-output backend (Trellis's, when the engine was started with
        ``structured_outputs_config={"backend": "trellis"}``). The token ids end
        with the EOS id when the model ended the text. Counts one call per
        generated token, as :func:`search.generate` does."""
        import json

        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        prompts = list(prompts)
        if constraint is None or isinstance(constraint, dict):
            constraint = [constraint] * len(prompts)
        if len(constraint) != len(prompts):
            raise ValueError(f"{len(constraint)} constraints for {len(prompts)} prompts")

        def one(c):
            so = None
            if c is not None:
                c = {k: json.dumps(v) if k == "structural_tag" and not isinstance(v, str) else v
                     for k, v in c.items()}
                so = StructuredOutputsParams(**c)
            return SamplingParams(max_tokens=int(max_new_tokens), temperature=float(temperature), n=int(n),
                                  seed=seed, logprobs=0, structured_outputs=so)

        params = [one(c) for c in constraint]
        requests = [{"prompt_token_ids": self.prompt_ids(p)} for p in prompts]
        results = self.llm.generate(requests, params, use_tqdm=False)
        self.calls += sum(len(c.token_ids) for r in results for c in r.outputs)
        return [[(tuple(int(t) for t in c.token_ids), float(c.cumulative_logprob or 0.0)) for c in r.outputs]
                for r in results]
