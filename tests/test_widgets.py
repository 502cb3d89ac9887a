import matplotlib

matplotlib.use("agg")
import matplotlib.pyplot as plt
from ipywidgets import FloatLogSlider, IntSlider

from torchhw import plots, widgets


def render(lr, n=3):
    fig, ax = plt.subplots()
    ax.set_title(f"lr={lr} n={n}")
    return fig


def test_explorer_renders_the_default_then_follows_the_controls():
    seen = []

    def spy(**values):
        seen.append(values)
        return render(**values)

    ex = widgets.explore(spy, lr=FloatLogSlider(value=0.1, min=-3, max=0), n=IntSlider(value=3))
    assert seen == [{"lr": 0.1, "n": 3}] and ex.renders == 1   # the static result
    ex.controls["n"].value = 5                                   # a reader moves a slider
    assert seen[-1] == {"lr": 0.1, "n": 5} and ex.renders == 2
    assert ex.figure().axes[0].get_title() == "lr=0.1 n=5"


def test_roofline_and_graph_plots_draw():
    ax = plots.roofline(100.0, 10.0, [("op", 1.0, 9.0), ("mm", 50.0, 90.0)], title="t")
    assert ax.get_title() == "t" and len(ax.lines) >= 3
    assert list(plots.attainable([1.0, 50.0], 100.0, 10.0)) == [10.0, 100.0]
    import torch
    a = torch.tensor(1.0, requires_grad=True)
    ax = plots.autograd_graph((a * 2).sin().grad_fn, {id(a): "a"})
    labels = [t.get_text() for t in ax.texts]
    assert "SinBackward0" in labels and "leaf: a" in labels
    plt.close("all")
