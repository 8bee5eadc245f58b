"""The default model, SmolLM2-135M-Instruct: discovery of its GGUF, conversion and cache."""
