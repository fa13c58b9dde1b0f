"""The exception types every public entry point raises.

Tests and callers match these types, never message text. The C++ core's
exceptions are translated to the same types in one place (register_errors in csrc/numpy_io.cpp).
"""


class UnmaskError(Exception):
    """Base class of every error unmask raises on purpose."""


class ConfigError(UnmaskError, ValueError):
    """A generation, export or device setting is invalid or contradicts another."""


class ModelFormatError(UnmaskError):
    """A checkpoint folder or model package is missing, malformed or unsafe."""


class DeviceError(UnmaskError):
    """The requested device or execution provider cannot be used here."""


class InputError(UnmaskError, ValueError):
    """Data handed to the decoding loop is malformed: prompt ids, a template, or a forward's logits
    (wrong shape or dtype, NaN or +inf where a token could be picked)."""


class StateError(UnmaskError, RuntimeError):
    """A Decoder used out of order, or from two threads at once (a decoder runs one call at a time)."""
