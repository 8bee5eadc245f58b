"""The official route: a vLLM V1 custom logits processor.

Installed with Trellis under the ``vllm.logits_processors`` entry point, so that
every vLLM engine in the environment loads it; it constrains only the requests
that carry a Trellis spec (see :mod:`constrain.engines.requests`)::

    SamplingParams(extra_args={"trellis": {"json_schema": schema}})     # offline
    {"vllm_xargs": {"trellis": "{\"regex\": \"[0-9]+\"}"}}               # REST body

(``vllm_xargs`` values are strings, numbers or booleans: a spec given there is
its JSON text.) :meth:`TrellisLogitsProcessor.validate_params` compiles the
spec when the front end admits the request, so that a malformed one fails its
own request with the compiler's message; the engine compiles it again (or
finds it in its cache) when the request joins the batch.
"""

from __future__ import annotations

import json
import logging
import sys

import numpy as np

from constrain.engines.vllm.compat import check_version

check_version()

import torch  # noqa: E402
from vllm.v1.sample.logits_processor import (  # noqa: E402
    BatchUpdate,
    LogitsProcessor,
    MoveDirectionality,
)

try:  # Model Runner V2's interface (import-light by vLLM's design)
    from vllm.v1.worker.gpu.sample.logits_processor.interface import (  # noqa: E402
        LogitsProcessor as _V2LogitsProcessor,
    )
except ImportError:  # pragma: no cover - a vLLM without the V2 runner
    _V2LogitsProcessor = None

#: the module whose params validator calls ``validate_params`` under Model
#: Runner V2 (``build_custom_logits_processors_params_validator``)
_V2_LOADER = "vllm.v1.worker.gpu.sample.logits_processor.loader"

from constrain.engines.vllm import sources  # noqa: E402
from constrain.engines.requests import (  # noqa: E402
    EXTRA_ARGS_KEY,
    ConstraintSource,
    SpecError,
    parse_spec,
)
from constrain.errors import ConstraintError  # noqa: E402
from constrain.runtime.batch import BatchMatcher  # noqa: E402
from constrain.runtime.bitmask import allocate_bitmask, apply_bitmask  # noqa: E402
from constrain.runtime.matcher import Matcher  # noqa: E402
from constrain.vocab.vocabulary import Vocabulary  # noqa: E402

logger = logging.getLogger(__name__)

_byte_source: ConstraintSource | None = None


def request_spec(sampling_params):
    """The request's parsed Trellis spec, or ``None`` when it has none. A spec
    given as JSON text (as ``vllm_xargs`` must) is decoded first."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    raw = extra.get(EXTRA_ARGS_KEY)
    if raw is None:
        return None
    if isinstance(raw, (str, bytes)):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SpecError(f"the {EXTRA_ARGS_KEY!r} spec is not valid JSON: {exc.msg} "
                            f"(line {exc.lineno}, column {exc.colno})") from None
        except UnicodeDecodeError as exc:
            raise SpecError(f"the {EXTRA_ARGS_KEY!r} spec is not UTF-8 text ({exc.reason} at "
                            f"byte {exc.start})") from None
        except RecursionError:  # json's own parser, ~100,000 levels deep
            raise SpecError(f"the {EXTRA_ARGS_KEY!r} spec nests too deeply to read") from None
    return parse_spec(raw)


def _validation_source() -> ConstraintSource:
    """The source the front end validates with: the engine's vocabulary when
    the plugin told it (:func:`sources.set_front_end`), else a vocabulary of
    the 256 bytes, which refuses every malformed or unsupported spec the same
    way (only budgets that depend on the vocabulary are left to the engine)."""
    global _byte_source
    fe = sources.front_end()
    if fe is not None:
        return sources.source_for(fe.tokenizer, fe.vocab_size, warm=True)
    if _byte_source is None:
        tokens = [bytes([b]) for b in range(256)] + [b"<eos>"]
        _byte_source = ConstraintSource(Vocabulary.from_tokens(tokens, eos_token_ids=[256],
                                                               name="bytes"))
    return _byte_source


class _Row:
    """A constrained row: its matcher (``None`` when its spec could not be
    compiled), the request's live output-token list, how many of those tokens
    the matcher has consumed, and whether the row may only end (``dead``)."""

    __slots__ = ("matcher", "output_ids", "consumed", "dead")

    def __init__(self, matcher: Matcher, output_ids: list[int]):
        self.matcher = matcher
        self.output_ids = output_ids
        self.consumed = 0
        self.dead = False


def _called_by_v2_runner(depth: int = 2) -> bool:
    """Whether the caller ``depth`` frames up is Model Runner V2's params
    validator: :meth:`TrellisLogitsProcessor.validate_params` is shared by
    both runners' front ends, and only the frame that calls it says which."""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__") == _V2_LOADER


class TrellisLogitsProcessor(*(b for b in (LogitsProcessor, _V2LogitsProcessor) if b is not None)):
    """Masks the logits of every request that carries a Trellis spec so that
    its output follows the spec's constraint; other rows are left untouched.

    A vLLM V1-interface processor. vLLM's Model Runner V2 (the default of GPU
    builds with Triton) loads every installed ``vllm.logits_processors``
    plugin through its own interface and refused this one, which stopped
    every engine in the environment from starting, Trellis used or not. So
    the class also has V2's interface, where it constrains nothing: there
    :meth:`validate_params` refuses a request with a Trellis spec, naming the
    routes that work (``VLLM_USE_V2_MODEL_RUNNER=0``, or the structured-output
    backend), and every other request passes untouched.

    Rows follow the :class:`BatchUpdate` of each step exactly (removed, then
    added, then moved, swaps included), and each row's matcher catches up with
    its request's output tokens before its mask is filled, so preempted and
    resumed requests replay what they had. A row whose output left the
    constraint (a token it refused, which only another processor forcing
    tokens could cause) is logged and allowed only EOS from then on. Masks are
    filled by :class:`constrain.BatchMatcher` where it exists (many rows at
    once, off the GIL), else row by row.
    """

    def __init__(self, vllm_config, *args):
        # V1: (vllm_config, device, is_pin_memory); V2: (vllm_config, req_states)
        self.v2 = len(args) == 1
        if self.v2:
            return
        from vllm.tokenizers import cached_tokenizer_from_config

        model_config = vllm_config.model_config
        self.vocab_size = model_config.get_vocab_size()
        self.source = None
        if not model_config.skip_tokenizer_init:
            tokenizer = cached_tokenizer_from_config(model_config=model_config)
            # compiled kernels and the token trie now, before any request's budget runs
            self.source = sources.source_for(tokenizer, self.vocab_size, warm=True)
        self.rows: dict[int, _Row] = {}
        max_rows = vllm_config.scheduler_config.max_num_seqs
        self.bitmask = allocate_bitmask(max_rows, self.vocab_size, backend="torch")
        # with no tokenizer the model's config still names EOS: a row that may
        # only end without one would mask every token (the sampler then draws
        # from a row of -inf)
        self.eos_ids = (sorted(self.source.vocab.eos_token_ids) if self.source
                        else config_eos_ids(model_config, self.vocab_size))
        self.batch_matcher = BatchMatcher()

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Refuse a request whose Trellis spec is malformed or does not compile
        (``ValueError`` with the compiler's message, which names the place), or
        that an engine decoding speculatively could not constrain."""
        spec = request_spec(sampling_params)
        if spec is None:
            return
        if _called_by_v2_runner():
            raise SpecError("this engine runs vLLM's Model Runner V2, where the Trellis logits "
                            "processor constrains nothing, so the 'trellis' spec would be "
                            "ignored: start the engine with VLLM_USE_V2_MODEL_RUNNER=0, or ask "
                            "through structured_outputs with the trellis backend")
        fe = sources.front_end()
        if fe is not None and fe.tokenizer is None:
            raise SpecError("a 'trellis' spec needs the model's tokenizer, but the engine was "
                            "started with skip_tokenizer_init")
        if fe is not None and fe.speculative:
            raise SpecError("vLLM runs no custom logits processor when it decodes speculatively, "
                            "so the 'trellis' spec would be ignored: use structured_outputs with "
                            "the trellis backend instead")
        _validation_source().compile(spec)

    def is_argmax_invariant(self) -> bool:
        """Masking changes which token is the most likely."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the batch's changes: removed rows go, added requests with a
        spec get a matcher (their spec compiled, or found in the cache), moved
        rows move (a swap exchanges two)."""
        if batch_update is None:
            return
        rows = self.rows
        for index in batch_update.removed:
            rows.pop(index, None)
        for index, params, _prompt_ids, output_ids in batch_update.added:
            rows.pop(index, None)
            spec = request_spec(params)
            if spec is None:
                continue
            rows[index] = self._new_row(spec, output_ids)
        for a, b, direction in batch_update.moved:
            row_a = rows.pop(a, None)
            row_b = rows.pop(b, None)
            if row_a is not None:
                rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                rows[a] = row_b

    def _new_row(self, spec, output_ids: list[int]) -> _Row:
        """A row for a request with ``spec``; a dead one (EOS only, logged)
        when the spec cannot be compiled here."""
        try:
            if self.source is None:
                raise ConstraintError("a 'trellis' spec needs the model's tokenizer, but the "
                                      "engine was started with skip_tokenizer_init")
            return _Row(Matcher(self.source.compile(spec)), output_ids)
        except ConstraintError as exc:
            logger.error("trellis: cannot constrain a request to %s (%s); it can only end now%s",
                         spec.describe(), exc, "" if self.eos_ids else
                         " (but no EOS id is known: every token is masked)")
            row = _Row(None, output_ids)
            row.dead = True
            return row

    def _catch_up(self, row: _Row) -> None:
        """Feed the matcher the request's output tokens it has not seen (and
        undo the ones the engine dropped)."""
        out = row.output_ids
        n = len(out)
        if n < row.consumed and row.matcher is not None:
            row.matcher.rollback(row.consumed - n)
            row.consumed = n
            row.dead = False
        if row.matcher is None:
            return
        while row.consumed < n and not row.dead:
            if row.matcher.is_terminated():
                break
            if not row.matcher.accept_token(out[row.consumed]):
                logger.error("trellis: output token %d left the constraint %r; the request can "
                             "only end now", out[row.consumed], row.matcher.grammar)
                row.dead = True
                break
            row.consumed += 1

    def add_request(self, req_idx: int, sampling_params) -> bool:
        """Model Runner V2: decline every request (its specs were refused)."""
        return False

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        """Mask the rows with a spec in place; other rows keep their logits.
        (Model Runner V2 passes ``ctx``: there nothing is masked.)"""
        if self.v2 or not self.rows:
            return logits
        n = logits.shape[0]
        bitmask = self.bitmask[:n]
        bitmask.fill_(-1)
        live, indices = [], []
        for index, row in self.rows.items():
            if index >= n:
                continue
            self._catch_up(row)
            if row.dead or row.matcher.is_terminated():
                self._only_eos(bitmask, index)
            else:
                live.append(row.matcher)
                indices.append(index)
        if live:
            self.batch_matcher.fill_next_token_bitmask(live, bitmask, indices)
        apply_bitmask(logits, bitmask)
        return logits

    def _only_eos(self, bitmask: torch.Tensor, index: int) -> None:
        row = bitmask[index].numpy().view(np.uint32)
        row[:] = 0
        for t in self.eos_ids:
            row[t >> 5] |= np.uint32(1 << (t & 31))


def config_eos_ids(model_config, vocab_size: int) -> list[int]:
    """The EOS token ids the model's configuration names (``eos_token_id`` of
    its Hugging Face text config, then of its config: an id or a list), those
    within the vocabulary."""
    for cfg in (getattr(model_config, "hf_text_config", None),
                getattr(model_config, "hf_config", None)):
        eos = getattr(cfg, "eos_token_id", None)
        if eos is None:
            continue
        ids = eos if isinstance(eos, (list, tuple)) else [eos]
        found = sorted({int(t) for t in ids
                        if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size})
        if found:
            return found
    return []


__all__ = ["TrellisLogitsProcessor", "request_spec"]
