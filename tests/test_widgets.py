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


def test_over_roof_names_points_above_their_roof():
    # peak 100 GFLOP/s, 10 GB/s: the ridge is at 10 FLOP/byte
    points = [("under", 1.0, 9.0), ("on the slope, in cache", 0.5, 12.0), ("above peak", 50.0, 130.0),
              ("within tolerance", 50.0, 105.0)]
    assert plots.over_roof(points, 100.0, 10.0) == [("on the slope, in cache", 2.4), ("above peak", 1.3)]
