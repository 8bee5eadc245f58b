"""Text and token ids for the model wrappers that hold a Hugging Face tokenizer
(:class:`search.TransformersLM`, :class:`search.lm.vllm.VLLMLM`): the one
place where prompts become ids (the chat template for chat models) and ids
become text (their exact bytes), and where the EOS ids are found."""

from __future__ import annotations

from typing import Iterable

__all__ = ["TokenizerText", "eos_ids"]


def _as_id_list(ids) -> list[int]:
    if ids is None:
        return []
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


def eos_ids(name: str, tokenizer, given=None, *more) -> tuple[int, ...]:
    """The ids that end generation: ``given`` when it is not ``None``, else the
    tokenizer's ``eos_token_id`` plus ``more`` (a generation config's). Raises
    ``ValueError`` naming ``name`` when there are none."""
    if given is None:
        found = set(_as_id_list(getattr(tokenizer, "eos_token_id", None)))
        for extra in more:
            found |= set(_as_id_list(extra))
        out = tuple(sorted({int(i) for i in found}))
    else:
        # ids, as the LM protocol reads them ("12" was ids 1 and 2)
        from search.lm.protocol import _eos_tuple

        out = _eos_tuple(given)
    if not out:
        raise ValueError(f"{name}: no EOS token id found; pass eos_token_ids=")
    return out


class TokenizerText:
    """Prompts to ids and ids to text over ``self.tokenizer`` (a Hugging Face
    tokenizer), for a wrapper that also sets ``name``, ``vocab_size``,
    ``eos_token_ids`` and ``_vocab = None``."""

    tokenizer = None
    name: str
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    _vocab = None

    @property
    def vocab(self):
        """The :class:`constrain.Vocabulary` of the tokenizer, sized to the model's
        vocabulary (built on first use, then kept)."""
        if self._vocab is None:
            from constrain import Vocabulary

            self._vocab = Vocabulary.from_huggingface(
                self.tokenizer, vocab_size=self.vocab_size, eos_token_ids=list(self.eos_token_ids),
                name=self.name,
            )
        return self._vocab

    @property
    def is_chat(self) -> bool:
        """Whether the tokenizer has a chat template (prompts are then wrapped in it
        by default)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    # -- text <-> ids -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, without any added special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Iterable[int]) -> str:
        """The text of ``token_ids``: the exact bytes of the tokens (EOS, special and
        padding ids skipped) decoded as UTF-8, an incomplete trailing character
        shown as U+FFFD."""
        return self.vocab.decode([int(t) for t in token_ids]).decode("utf-8", errors="replace")

    def apply_chat_template(self, prompt: str, system: str | None = None) -> list[int]:
        """The token ids of a one-turn chat: an optional ``system`` message, the user
        ``prompt`` and the assistant header, so that the model answers next."""
        if not self.is_chat:
            raise ValueError(f"{self.name} has no chat template")
        if system is not None and not isinstance(system, str):  # (a Jinja error before)
            raise ValueError(f"system must be a string or None, got {system!r}")
        messages = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.encode(text)

    def prompt_ids(self, prompt, chat_template: bool | None = None, system: str | None = None) -> list[int]:
        """The token ids to condition on: ``prompt`` itself if it is a sequence of
        ids; else the chat template applied to it when ``chat_template`` is true, or
        is ``None`` and the model is a chat model; else the plain encoding (with the
        tokenizer's BOS, if it adds one)."""
        if not isinstance(prompt, str):
            from search.lm.protocol import check_prompt_ids

            return check_prompt_ids([prompt] if isinstance(prompt, int) else prompt,
                                    getattr(self, "vocab_size", None))
        if chat_template is None:
            chat_template = self.is_chat
        if chat_template:
            return self.apply_chat_template(prompt, system=system)
        if system is not None:
            raise ValueError("a system prompt needs the chat template")
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))
