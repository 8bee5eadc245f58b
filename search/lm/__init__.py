"""The language-model layer, the only code that runs a model.

* :mod:`search.lm.protocol`: the LM protocol the autoregressive drivers use
  (``logprobs``, ``calls``, ``vocab_size``, ``eos_token_ids``), :class:`CallableLM`,
  :func:`as_lm`, and what every driver does with a model (prompt ids, decoding,
  lock-step token streams);
* :mod:`search.lm.transformers`: :class:`TransformersLM`, the one transformers
  wrapper, with its batched scoring and the one transformers-version shim;
* :mod:`search.lm.kv_tree`: :class:`KVPrefixTree`, the KV cache shared along
  common prefixes within a byte budget, behind ``TransformersLM.logits``;
* :mod:`search.lm.diffusion`: the masked-diffusion protocol and its transformers
  wrapper.
"""
