"""The ``harness`` command.

User mistakes (unknown run, invalid graph, bad JSON, invalid answer, a wrong
option) print one line on stderr and exit 2; they never show a traceback.

Each command module (``runs``, ``travel``, ``transfer``) adds its commands with
``register(subparsers)``; they share ``common`` and never import each other. What
they print comes from :mod:`server.present`, which the web handlers share.
"""

from .main import main, parser

__all__ = ["main", "parser"]
