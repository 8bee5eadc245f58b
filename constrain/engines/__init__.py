"""Integrations with inference engines, one small module per engine (``hf``: Hugging Face ``generate``)."""
