"""The run explorer: an indexer that follows coordinator programs into SQLite, and a web app over it."""

from .app import Explorer

__all__ = ["Explorer"]
