"""Old import path of the error types; they live in ``runtime.core.errors``."""

from .core.errors import *  # noqa: F403
from .core.errors import __all__  # noqa: F401
