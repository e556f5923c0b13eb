"""The time-travel debugger in the browser: one Litestar app over a Runtime.

``create_app`` (``app.py``) composes it: HTML pages (``pages.py``) and the JSON API
(``api.py``) call the same services (``services.py``), which run the Runtime's
synchronous store reads in worker threads so requests never block each other.
"""

from .app import create_app

__all__ = ["create_app"]
