"""Old keyword arguments of a function whose options now travel as one settings dataclass: the keywords fill in the
dataclass, so existing calls keep working, and a keyword given next to the object is refused (one would be ignored)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping, TypeVar

__all__ = ["settings_from_keywords"]

T = TypeVar("T")


def settings_from_keywords(function: str, settings_class: type[T], settings: T | None,
                           keywords: Mapping[str, Any]) -> T:
    """`settings` itself, or a `settings_class` built from the old `keywords` (its field names)."""
    names = {f.name for f in fields(settings_class)}
    unknown = sorted(set(keywords) - names)
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword argument(s) {unknown}.")
    if settings is not None and keywords:
        raise ValueError(f"{function} got settings= and {sorted(keywords)}; set them in the {settings_class.__name__} "
                         "object instead.")
    return settings if settings is not None else settings_class(**keywords)
