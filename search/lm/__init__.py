"""The language-model layer: the LM protocol, the transformers wrapper with its KV cache, and the masked-diffusion protocol."""
