"""Per-file-kind splitting and reassembly (notebooks, markdown, ...)."""


class UnitSyntaxError(Exception):
    """Raised by a ``run_python`` callback when a unit of source does not parse as Python."""
