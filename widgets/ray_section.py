"""The config picker's controls for a Ray cluster (Ray's part of "Where it runs", :mod:`.cluster_section`).

With "Ray cluster" chosen, they show the cluster's address, what each worker reserves (CPUs, a GPU) and how
the workers are spread, and the form's process count means workers on the cluster. "Look at the cluster" shows its
live nodes with their free CPUs and GPUs when this kernel has joined it (``ray.init``); the picker never joins a
cluster by itself (that starts Ray's machinery in the kernel), and says so.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as w

from notebook_accel.cluster import RayCluster
from notebook_accel.cluster.ray_spec import RAY as RAY_SPEC
from notebook_accel.widgets.form_layout import STYLE, labelled

__all__ = ["RaySection", "RAY", "cluster_html"]

RAY = RAY_SPEC.title
_PLACEMENTS = [("pack: as few nodes as possible", "pack"), ("spread: as many nodes as possible", "spread"),
               ("strict pack: one node, or fail", "strict_pack"), ("strict spread: one node each, or fail",
                                                                   "strict_spread")]
_BACK_CHANNELS = [("auto: direct when the workers reach this kernel", "auto"), ("direct to this kernel", "direct"),
                  ("relay through the cluster's head", "relay")]
_DEFAULT = RayCluster()


def cluster_html(ray: Any) -> str:
    """The live nodes of the cluster ``ray`` has joined, with their free and total CPUs and GPUs (HTML)."""
    if ray is None or not ray.is_initialized():
        return ("<span style='color:#6b7280'>not connected: run <code>ray.init(address=...)</code> in this kernel to "
                "see the cluster here (a launch joins it by itself)</span>")
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        free = ray.available_resources()
    except Exception as e:  # noqa: BLE001 - a cluster that stopped answering
        return f"<span style='color:#b42318'>the cluster did not answer: {html.escape(str(e))}</span>"
    rows = "".join(
        f"<tr><td>{html.escape(str(n.get('NodeManagerAddress', '?')))}</td>"
        f"<td>{n.get('Resources', {}).get('CPU', 0):g}</td><td>{n.get('Resources', {}).get('GPU', 0):g}</td></tr>"
        for n in nodes)
    return (f"<div style='font-size:12px'>{len(nodes)} node(s); free now: {free.get('CPU', 0):g} CPUs, "
            f"{free.get('GPU', 0):g} GPUs<table><tr><th>node</th><th>CPUs</th><th>GPUs</th></tr>{rows}</table></div>")


class RaySection(w.VBox):
    """A Ray cluster's settings as controls; :meth:`section` gives the config's ``cluster:`` value.

    Attributes:
        address, cpus, gpu, placement, keep_warm, back_channel: the cluster's settings; nodes: what "Look at the
        cluster" found;
        controls: the controls whose changes change the config; hint: the words beside the "Where it runs" choice.
    """

    hint = "a Ray cluster places one worker per process on its nodes"

    def __init__(self) -> None:
        self.address = w.Text(value="auto", description="Address", placeholder="auto, ray://head:10001, head:6379",
                              style=STYLE)
        self.cpus = w.FloatText(value=1.0, description="CPUs per worker", style=STYLE)
        self.gpu = w.Checkbox(value=False, description="one GPU per worker", style=STYLE, indent=True)
        self.placement = w.Dropdown(options=_PLACEMENTS, value="pack", description="Placement", style=STYLE)
        self.keep_warm = w.BoundedFloatText(value=_DEFAULT.keep_warm, min=0.0, max=86400.0, description="Keep warm (s)",
                                            style=STYLE)
        self.back_channel = w.Dropdown(options=_BACK_CHANNELS, value=_DEFAULT.back_channel, description="Way back",
                                       style=STYLE)
        self.look = w.Button(description="Look at the cluster", icon="search", layout=w.Layout(width="auto"))
        self.nodes = w.HTML()
        self.look.on_click(lambda _: self.show_nodes())
        self.controls: list[w.Widget] = [self.address, self.cpus, self.gpu, self.placement, self.keep_warm,
                                         self.back_channel]
        super().__init__([labelled(self.address, "the cluster this kernel joins"),
                          labelled(self.cpus, "Ray reserves them for each worker"),
                          labelled(self.gpu, "nccl on GPU workers, gloo on CPU ones"),
                          labelled(self.placement, ""),
                          labelled(self.keep_warm, "the workers wait this long for the next launch (0: not at all)"),
                          labelled(self.back_channel, "how output and stop signals travel (relay: notebook off "
                                                      "the cluster)"),
                          w.HBox([self.look]), self.nodes])

    @property
    def uses_gpu(self) -> bool:
        """Whether each worker reserves a GPU."""
        return bool(self.gpu.value)

    def set_values(self, cluster: RayCluster) -> None:
        """Show ``cluster``."""
        self.address.value = cluster.address
        self.cpus.value = float(cluster.resources_per_worker.get("CPU", 1.0))
        self.gpu.value = cluster.uses_gpu
        self.placement.value = cluster.placement
        self.keep_warm.value = float(cluster.keep_warm)
        self.back_channel.value = cluster.back_channel

    def section(self, kept: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``cluster:`` section the controls describe (keys the form does not show are kept from ``kept``).

        A value the cluster cannot take is the :class:`~notebook_accel.config.Config`'s to report (``cluster: ...``).
        """
        resources: dict[str, float] = {"CPU": float(self.cpus.value)}
        if self.gpu.value:
            resources["GPU"] = 1.0
        section = {**dict(kept or {}), "kind": "ray", "address": self.address.value.strip(),
                   "resources_per_worker": resources, "placement": self.placement.value}  # the Config checks it
        for name, control in (("keep_warm", self.keep_warm), ("back_channel", self.back_channel)):
            section.pop(name, None)
            if control.value != getattr(_DEFAULT, name):  # a default is left out of the config
                section[name] = control.value
        return section

    def show_nodes(self) -> None:
        """Show the live nodes of the cluster this kernel joined (never joins one itself)."""
        import sys

        self.nodes.value = cluster_html(sys.modules.get("ray"))
