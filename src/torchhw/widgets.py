"""Interactive controls that still leave a real result where no one can move them.

:func:`explore` shows the controls and, below them, the figure for their current values as
an ordinary cell output. Moving a control redraws that output in place. Under papermill or
nbval, where no front end is attached, nothing moves, and the notebook keeps the figure for
the default values: the same plot a reader sees before touching anything.

    explore(lambda lr: plot_for(lr), lr=FloatLogSlider(value=0.01, min=-4, max=0))
"""

from __future__ import annotations

from typing import Any, Callable

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


class Explorer:
    """The controls, the render function, and the display handle of the figure."""

    def __init__(self, render: Callable[..., Figure], controls: dict[str, Any]) -> None:
        self.render = render
        self.controls = controls
        self.handle: Any = None
        self.renders = 0

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def figure(self) -> Figure:
        """Render for the controls' current values (and close the figure for pyplot)."""
        fig = self.render(**self.values())
        plt.close(fig)  # shown through the display handle only, never twice
        self.renders += 1
        return fig

    def update(self, _change: Any = None) -> None:
        fig = self.figure()
        if self.handle is not None:
            self.handle.update(fig)


def explore(render: Callable[..., Figure], **controls: Any) -> Explorer:
    """Show ``controls`` (ipywidgets) above the figure ``render(**values)``; redraw on change.

    ``render`` must return a matplotlib Figure. Returns the :class:`Explorer`, whose
    ``update`` a test can call after setting a control's value.
    """
    import ipywidgets as widgets
    from IPython.display import display

    explorer = Explorer(render, controls)
    display(widgets.HBox(list(controls.values())))
    explorer.handle = display(explorer.figure(), display_id=True)
    for control in controls.values():
        control.observe(explorer.update, names="value")
    return explorer
