"""Old import path of the domain records; they live in ``runtime.core.records``."""

from .core.records import *  # noqa: F403
from .core.records import __all__  # noqa: F401
