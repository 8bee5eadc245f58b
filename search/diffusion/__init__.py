"""Drivers for masked-diffusion language models: the denoising loop and DINGO's dynamic programming."""
