"""The page's files: those shipped in ``chaosd/arena/static``, and the vocabulary module written from Python."""

from __future__ import annotations

from importlib import resources

from chaosd.arena.vocabulary import vocabulary_module

__all__ = ["CONTENT_TYPES", "VOCABULARY", "static_files"]

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
VOCABULARY = "vocabulary.js"


def static_files() -> dict[str, bytes]:
    """Every file shipped in ``chaosd/arena/static`` of a type in :data:`CONTENT_TYPES` (not the type checker's
    files), and ``vocabulary.js``: read once, and only these names are ever served."""
    root = resources.files("chaosd.arena") / "static"
    files = {
        entry.name: entry.read_bytes()
        for entry in root.iterdir()
        if entry.is_file() and any(entry.name.endswith(ext) for ext in CONTENT_TYPES)
    }
    files[VOCABULARY] = vocabulary_module().encode()
    return files
