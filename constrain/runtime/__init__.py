"""Run-time state over compiled constraints: bitmask allocation and application, and the stateful ``Matcher``."""
