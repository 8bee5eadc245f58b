"""Release numbers of the engines Trellis plugs into, for their version checks
(:mod:`constrain.engines.vllm.compat`, :mod:`constrain.engines.sglang`)."""

from __future__ import annotations


def release(version: str, parts: int) -> tuple[int, ...] | None:
    """The first ``parts`` numbers of the release ``version`` (a local part
    such as ``+cpu`` ignored): ``release("0.32.0+cpu", 2) == (0, 32)``; ``None``
    when it has fewer numbers or they are not numbers (a check then refuses
    it)."""
    numbers = version.split("+")[0].split(".")[:parts]
    if len(numbers) != parts:
        return None
    try:
        return tuple(int(p) for p in numbers)
    except ValueError:
        return None


def supported(version: str, low: tuple[int, ...], high: tuple[int, ...]) -> bool:
    """Whether ``low <= release < high`` for ``version``'s release, read to as
    many numbers as ``low`` has."""
    found = release(version, len(low))
    return found is not None and low <= found < high


__all__ = ["release", "supported"]
