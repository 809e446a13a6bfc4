"""NotEmulated: what the emulation raises when the original touches an old API it does not model."""

from __future__ import annotations

#: every NotEmulated raised in this process, in order (a script may catch one: the child can still see it)
RAISED: list[str] = []


class NotEmulated(Exception):
    """The original touched an old-stack API that the emulation does not model."""

    def __init__(self, api: str):
        self.api = api
        RAISED.append(api)
        super().__init__(f"cannot run the original: `{api}` is not emulated")


def not_emulated(api: str):
    """A callable standing for an API that is known but not modelled: calling it raises NotEmulated."""

    def _raise(*args, **kwargs):
        raise NotEmulated(api)

    _raise.__name__ = api.rsplit(".", 1)[-1]
    _raise.__qualname__ = _raise.__name__
    _raise.__neuron_migrate_not_emulated__ = api
    return _raise
