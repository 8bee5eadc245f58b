"""Autoregressive drivers: plain decoding, beam and best-first beam search, lattice search, AWRS and SMC."""
