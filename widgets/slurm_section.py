"""The config picker's controls for Slurm (Slurm's part of "Where it runs", :mod:`.cluster_section`).

With "Slurm" chosen, they show the GPUs to use on each node (one per task), the partition, how long a run's step
stays warm for the next launch (``keep_warm``), and, when this
kernel runs inside an allocation (``SLURM_JOB_ID``), the allocation's job, nodes, CPUs and GPUs as Slurm gave them.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import ipywidgets as w

from notebook_accel import environment
from notebook_accel.cluster.slurm import SlurmCluster
from notebook_accel.widgets.form_layout import STYLE, labelled

__all__ = ["SlurmSection", "allocation_html"]

_DEFAULT = SlurmCluster()
_SHOWN = (("SLURM_JOB_ID", "job"), ("SLURM_JOB_NODELIST", "nodes"), ("SLURM_JOB_CPUS_PER_NODE", "CPUs per node"),
          ("SLURM_GPUS_ON_NODE", "GPUs on this node"), ("SLURM_JOB_PARTITION", "partition"))


def allocation_html(variables: Mapping[str, str | None]) -> str:
    """The allocation this kernel runs in, from its ``SLURM_*`` variables (HTML)."""
    if not variables.get("SLURM_JOB_ID"):
        return ("<span style='color:#6b7280'>this kernel is not in a Slurm allocation (no SLURM_JOB_ID): start the "
                "notebook inside one (salloc, sbatch, Open OnDemand)</span>")
    rows = "".join(f"<tr><td>{label}</td><td>{html.escape(str(variables[name]))}</td></tr>"
                   for name, label in _SHOWN if variables.get(name))
    return f"<div style='font-size:12px'>the kernel's allocation<table>{rows}</table></div>"


class SlurmSection(w.VBox):
    """Slurm's settings as controls; :meth:`section` gives the config's ``cluster:`` value.

    Attributes:
        gpus: GPUs per node (one per task, 0: CPU); partition: where to ask for an allocation ("" : the kernel's);
        keep_warm: seconds the step's tasks wait for the next launch (0: the step ends with each run);
        allocation: the kernel's allocation; controls, hint: as every placement's section.
    """

    hint = "Slurm runs one task per process across the kernel's allocation"

    def __init__(self) -> None:
        self.gpus = w.IntText(value=0, description="GPUs per node", style=STYLE)
        self.partition = w.Text(value="", description="Partition", placeholder="empty: the kernel's allocation",
                                style=STYLE)
        self.keep_warm = w.BoundedFloatText(value=_DEFAULT.keep_warm, min=0.0, max=86400.0,
                                            description="Keep warm (s)", style=STYLE)
        self.allocation = w.HTML(allocation_html({name: environment.get(name) for name, _ in _SHOWN}))
        self.controls: list[w.Widget] = [self.gpus, self.partition, self.keep_warm]
        super().__init__([labelled(self.gpus, "one GPU per task, nccl; 0: the CPU with gloo"),
                          labelled(self.partition, ""),
                          labelled(self.keep_warm, "the tasks wait this long for the next launch (0: not at all)"),
                          self.allocation])

    @property
    def uses_gpu(self) -> bool:
        """Whether each task drives a GPU."""
        return int(self.gpus.value or 0) > 0

    def set_values(self, cluster: SlurmCluster) -> None:
        """Show ``cluster``."""
        self.gpus.value = cluster.gpus_per_node
        self.partition.value = cluster.partition or ""
        self.keep_warm.value = float(cluster.keep_warm)

    def section(self, kept: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``cluster:`` section the controls describe (keys the form does not show are kept from ``kept``)."""
        section = {**dict(kept or {}), "kind": "slurm", "gpus_per_node": int(self.gpus.value or 0),
                   "partition": self.partition.value.strip() or None}
        section.pop("keep_warm", None)
        if self.keep_warm.value != _DEFAULT.keep_warm:  # a default is left out of the config
            section["keep_warm"] = self.keep_warm.value
        return section
