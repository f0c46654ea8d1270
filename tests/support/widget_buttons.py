"""Walking an ipywidgets tree as a test clicks it."""
from __future__ import annotations

import ipywidgets as widgets


def buttons(box) -> list:
    """Every Button in the widget tree, depth first in display order (the browser test clicks the first)."""
    found = []

    def walk(w):
        if isinstance(w, widgets.Button):
            found.append(w)
        for child in getattr(w, "children", ()):
            walk(child)
    walk(box)
    return found
