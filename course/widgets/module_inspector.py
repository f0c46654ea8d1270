"""Module inspector (chapter 03): placeholder, replaced below."""
from __future__ import annotations

import ipywidgets as widgets


def explore(nn=None):
    button = widgets.Button(description="train / eval")
    out = widgets.HTML("module inspector")
    button.on_click(lambda _: setattr(out, "value", out.value + "."))
    return widgets.VBox([button, out])
