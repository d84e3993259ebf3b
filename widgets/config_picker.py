"""The config picker: a form in a notebook cell that builds a :class:`~notebook_accel.config.Config`.

It shows the detected hardware (CPU cores; GPUs with name and memory, found through NVML / nvidia-smi by
:mod:`notebook_accel.hardware`, never through the CUDA runtime, so a later launch can still fork) and offers only
what the hardware can do: processes bounded by the chosen devices, mixed-precision modes the devices support.
Combinations that cannot work (several machines without the main machine's address, a machine rank out of range,
no GPU selected) show an inline message under the form instead of raising; ``.config`` raises the same problems
as a :class:`~notebook_accel.config.ConfigError`.

``notebook_launcher(train, config=picker)`` uses ``picker.config``; Save and Load write and read a YAML file.
The process count in the form is per machine; ``Config.num_processes`` counts all machines (accelerate's meaning).
Settings the form does not show (``rdzv_backend``, accelerate's extra sections, ...) are kept from the loaded config.

The Engine control picks DDP, FSDP or DeepSpeed; the chosen engine's section (``fsdp_config`` /
``deepspeed_config``, accelerate's key names) appears under it, one :class:`~widgets.engine_section.EngineSection`
per engine of :data:`notebook_accel.config.engine_form.ENGINES`, and is checked by the same table as the file.

"Where it runs" (:mod:`~widgets.cluster_section`) chooses this machine or a cluster (the ``cluster:`` section);
on a cluster the machine's own devices, machines and port are hidden. Numbers are typed freely: a value the config
cannot take is a problem under the form, naming the value. Displayed, the picker shows the form and, under it, the
summary and YAML it would write (:mod:`~widgets.picker_summary`, plain HTML: a saved notebook still shows it).
"""

from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Union

import ipywidgets as w

from notebook_accel import hardware
from notebook_accel.config import Config, ConfigError, default_config_path, load_config, save_config
from notebook_accel.config.engine_form import ENGINES
from notebook_accel.config.files import config_file_path
from notebook_accel.config.fp8 import asks_for_emulation
from notebook_accel.config.machine import precision_choices
from notebook_accel.hardware import GpuInfo
from notebook_accel.widgets import picker_form, picker_summary
from notebook_accel.widgets.cluster_section import ClusterSection
from notebook_accel.widgets.engine_section import EngineSection
from notebook_accel.widgets.form_layout import ROW_WIDTH, STYLE, labelled, split_label

__all__ = ["ConfigPicker"]

PathLike = Union[str, "os.PathLike[str]"]
_GPU, _CPU = "GPU", "CPU"
_DDP = "DDP"  # the engine choice without a section: plain data parallel (or one process)


class ConfigPicker(w.VBox):
    """A form that builds a :class:`Config` from controls, showing this machine's hardware.

    Args:
        config: the starting config: a :class:`Config`, a path, or ``None`` for the default config file (see
            :mod:`notebook_accel.config.locate`), or one process per GPU (one CPU process) when there is none.
        path: the file the Save and Load buttons use (default: :func:`default_config_path`).
        cpu_count, gpus: the hardware to offer; detected (without initialising CUDA) when not given.

    Attributes:
        controls: ``device gpus processes mixed_precision accumulation batch_size port machines machine_rank
            main_ip engine path``: the controls (ipywidgets), public so code and tests can set them.
        process_limit: the most processes per machine the chosen devices allow.
        engines: ``distributed_type`` -> that engine's :class:`EngineSection` (its ``controls`` by file key).
        effective: the effective batch size line; message: the inline problems or the summary.

    Example:
        >>> picker = ConfigPicker()            # doctest: +SKIP
        >>> picker                             # shows the form in the cell   # doctest: +SKIP
        >>> notebook_launcher(train, config=picker)   # doctest: +SKIP
    """

    def __init__(
        self,
        config: Config | PathLike | None = None,
        *,
        path: PathLike | None = None,
        cpu_count: int | None = None,
        gpus: Sequence[GpuInfo] | None = None,
    ) -> None:
        picker_form.check_hardware(cpu_count, gpus)
        self._cpus = hardware.cpu_count() if cpu_count is None else cpu_count
        self._gpus: list[GpuInfo] = hardware.detect_gpus() if gpus is None else list(gpus)
        self._applying = False
        self._notes: list[str] = []
        self._problems: list[str] = []
        self._config: Config | None = None
        self._display_handle: Any = None
        self._shown_summary = ""
        self.process_limit = 1
        self._hints: dict[w.Widget, str] = {}  # control -> the explanation shown beside it
        self._build_controls(path)
        super().__init__(children=self._layout())
        self.add_class("nacc-config-picker")
        start, note = picker_form.starting_config(config, self._gpus)
        self._base = start
        self._apply(start, [note] if note else [])

    # ----------------------------------------------------------------- public API
    @property
    def config(self) -> Config:
        """The config the form describes.

        Raises:
            ConfigError: the form's values do not fit together (the same lines the inline message shows).
        """
        if self._config is None:
            raise ConfigError(self._problems)
        return self._config

    @property
    def problems(self) -> list[str]:
        """Why the form's values do not make a valid config (empty when :attr:`config` works)."""
        return list(self._problems)

    @property
    def messages(self) -> list[str]:
        """The lines under the form: notes from the last load, then the current problems (empty when all is well)."""
        return [*self._notes, *self._problems]

    def save(self, path: PathLike | None = None) -> Path:
        """Write the config to ``path`` (default: the path field) and return the path written.

        Raises:
            ConfigError: the form is invalid or the file cannot be written.
        """
        target = self._target(path)
        written = save_config(self.config, target)
        self._notes = [f"saved to {written}"]
        self._show()
        return written

    def load(self, path: PathLike | None = None) -> Config:
        """Read ``path`` (default: the path field) into the form and return the loaded config.

        Values this machine cannot run (more processes than devices, fp16 on CPU, GPUs it lacks) are adjusted,
        with a note in :attr:`messages`.

        Raises:
            ConfigError: the file is missing or invalid.
        """
        target = self._target(path)
        loaded = load_config(target)
        self.path.value = str(target)
        self._base = loaded
        self._apply(loaded, [f"loaded {target}"])
        return loaded

    # ----------------------------------------------------------------- building
    def _build_controls(self, path: PathLike | None) -> None:
        gpus = self._gpus
        self.hardware_info = w.HTML(picker_form.hardware_html(self._cpus, gpus))
        self.device = w.ToggleButtons(options=[_GPU, _CPU] if gpus else [_CPU], description="Device", style=STYLE)
        self.gpus = w.SelectMultiple(
            options=[(f"{g.index}: {g.name} ({picker_form.gib(g.total_memory_bytes)})", g.index) for g in gpus],
            value=tuple(g.index for g in gpus), rows=min(max(len(gpus), 1), 8), description="GPUs", style=STYLE,
        )
        self.processes = self._number("Processes per machine", 1)
        self.mixed_precision = w.Dropdown(options=precision_choices([]), value="no", description="Mixed precision",
                                          style=STYLE)
        self.accumulation = self._number("Gradient accumulation (1 = none)", 1)
        self.batch_size = self._number("Batch size per device (0 = unset)", 0)
        self.effective = w.HTML()
        self.port = self._number("Port (0 = pick a free one)", 0)
        self.machines = self._number("Machines", 1)
        self.machine_rank = self._number("This machine's rank (0 = the main one)", 0)
        self.main_ip = w.Text(description="Main machine address", placeholder="e.g. 10.0.0.1", style=STYLE)
        self.engine = w.Dropdown(options=[("DDP (every process holds the whole model)", _DDP)] + [
            (form.title, name) for name, form in ENGINES.items()], value=_DDP, description="Engine", style=STYLE)
        self.engines = {name: EngineSection(form) for name, form in ENGINES.items()}
        self.cluster = ClusterSection()  # where it runs: this machine or a cluster (notebook_accel.cluster)
        self.cluster.on_change(self._on_change)
        self.message = w.HTML()
        start = default_config_path() if path is None else config_file_path(path)
        self.path = w.Text(value=str(start), description="File", style=STYLE)
        self.save_button = w.Button(description="Save", icon="save", layout=w.Layout(width="auto"))
        self.load_button = w.Button(description="Load", icon="folder-open", layout=w.Layout(width="auto"))
        self.save_button.on_click(lambda _: self._guarded("save", self.save))
        self.load_button.on_click(lambda _: self._guarded("load", self.load))
        for control in (self.device, self.gpus, self.processes, self.mixed_precision, self.accumulation,
                        self.batch_size, self.port, self.machines, self.machine_rank, self.main_ip, self.engine):
            control.observe(self._on_change, names="value")
        for section in self.engines.values():
            section.on_change(self._on_change)

    def _number(self, label: str, value: int) -> w.IntText:
        """A number box described by the label's short name; its explanation is shown beside it."""
        name, hint = split_label(label)
        box = w.IntText(value=value, description=name, style=STYLE)
        self._hints[box] = hint
        return box

    def _layout(self) -> list[w.Widget]:
        def rows(*controls: w.Widget) -> list[w.Widget]:
            return [labelled(c, self._hints.get(c, "")) for c in controls]

        top = rows(self.device, self.gpus, self.processes, self.mixed_precision, self.accumulation, self.batch_size)
        bottom = rows(self.port, self.machines, self.machine_rank, self.main_ip, self.engine)
        self.path.layout = w.Layout(flex="1 1 100%", width="100%", min_width=ROW_WIDTH)  # a long path stays readable
        buttons = w.HBox([self.path, self.save_button, self.load_button], layout=w.Layout(flex_flow="row wrap"))
        return [self.hardware_info, self.cluster, *top, self.effective, *bottom, *self.engines.values(), self.message,
                buttons]

    # ----------------------------------------------------------------- config -> form
    def _apply(self, config: Config, notes: list[str]) -> None:
        """Show ``config`` in the controls, adjusting what this machine cannot do (with a note for each)."""
        self._applying = True
        try:
            self.cluster.set_values(config.cluster)
            use_cpu = config.use_cpu or not self._gpus
            if not self._gpus and picker_form.asks_for_gpus(config) and config.cluster is None:
                notes.append("the config asks for GPUs but none was detected: using CPU")
            self.device.value = _CPU if use_cpu else _GPU
            if self._gpus:
                ids = config.gpu_id_list
                present = [g.index for g in self._gpus]
                chosen = present if ids is None else [i for i in ids if i in present]
                if ids is not None and len(chosen) < len(ids) and not use_cpu:
                    notes.append(f"GPUs {sorted(set(ids) - set(present))} are not on this machine: left out")
                self.gpus.value = tuple(chosen)
            self._refresh_limits()
            wanted = config.processes_per_machine
            if wanted > self.process_limit:
                notes.append(f"{wanted} processes per machine asked, {self.process_limit} possible here: using "
                             f"{self.process_limit}")
            self.processes.value = min(wanted, self.process_limit)
            mixed = config.mixed_precision
            if mixed not in self.mixed_precision.options:
                notes.append(f"mixed precision {mixed!r} is not supported here: using 'no'")
                mixed = "no"
            self.mixed_precision.value = mixed
            self.accumulation.value = config.gradient_accumulation_steps
            self.batch_size.value = config.per_device_batch_size or 0
            self.port.value = config.main_process_port or 0
            self.machines.value = config.num_machines
            self.machine_rank.value = config.machine_rank
            self.main_ip.value = config.main_process_ip or ""
            notes += self._apply_engine(config)
        finally:
            self._applying = False
        self._notes = notes
        self._update()

    def _apply_engine(self, config: Config) -> list[str]:
        """Show the config's engine and every engine's section (a section kept for a later switch too)."""
        self.engine.value = config.distributed_type if config.distributed_type in self.engines else _DDP
        notes = []
        for name, section in self.engines.items():
            notes += section.set_values(config.extra.get(section.form.section))
        self._refresh_engine()
        return notes

    def _refresh_engine(self) -> None:
        """Show only the chosen engine's section."""
        for name, section in self.engines.items():
            section.layout.display = None if name == self.engine.value else "none"

    def _refresh_limits(self, note: bool = False) -> None:
        """Show the GPU list only on GPU; bound processes by the chosen devices (with a ``note`` when that lowers
        the count); offer the supported precisions."""
        here = not self.cluster.on_cluster  # on a cluster, the devices are the cluster's: no local bound
        on_gpu = self.device.value == _GPU and here
        for control in (self.device, self.machines, self.machine_rank, self.main_ip, self.port):
            control.layout.display = None if here else "none"
        self.gpus.layout.display = None if on_gpu else "none"
        chosen = [g for g in self._gpus if g.index in self.gpus.value] if on_gpu else []
        limit = (max(len(chosen), 1) if on_gpu else self._cpus) if here else 100_000
        self.process_limit = max(limit, 1)
        if self.processes.value > self.process_limit and note:
            self._notes.append(f"processes per machine: {self.processes.value} → {self.process_limit}, the most "
                               f"the chosen devices allow")
        self.processes.value = min(self.processes.value, self.process_limit)
        # no GPU chosen yet: what every GPU allows; fp8 emulation (fp8_config) runs anywhere
        options = precision_choices((chosen or self._gpus) if on_gpu else [], asks_for_emulation(self._base.extra))
        if list(self.mixed_precision.options) != options:
            keep = self.mixed_precision.value if self.mixed_precision.value in options else "no"
            self.mixed_precision.options = options
            self.mixed_precision.value = keep

    # ----------------------------------------------------------------- form -> config
    def _on_change(self, change: dict[str, Any]) -> None:
        if self._applying:
            return
        if change.get("owner") in (self.device, self.gpus, self.cluster.where):
            self._applying = True
            try:
                self._refresh_limits(note=True)
            finally:
                self._applying = False
        self._refresh_engine()
        self._update()

    def _update(self) -> None:
        """Rebuild the config from the controls and show the problems or the summary."""
        here = not self.cluster.on_cluster
        problems = picker_form.form_problems(self.device.value == _GPU and here, len(self.gpus.value),
                                             self.processes.value, self.process_limit, self._cpus,
                                             self.machines.value if here else 1, self.port.value if here else 0)
        config: Config | None = None
        try:
            config = self._build()
        except ConfigError as e:
            problems += e.problems
        self._config = None if problems else config
        self._problems = problems
        self._show()

    def _build(self) -> Config:
        here = not self.cluster.on_cluster
        on_gpu = self.device.value == _GPU if here else self.cluster.uses_gpu
        machines = self.machines.value if here else 1
        extra = {k: v for k, v in {**self._base.extra, "cluster": self.cluster.section(
            self._base.extra.get("cluster"))}.items() if v is not None or k != "cluster"}
        chosen_engine = self.engines.get(self.engine.value)
        if chosen_engine is not None:
            section = chosen_engine.form.section
            extra[section] = chosen_engine.section(self._base.extra.get(section))
        return dataclasses.replace(
            self._base,
            distributed_type=None if chosen_engine is None else chosen_engine.form.distributed_type,
            extra=extra,
            use_cpu=not on_gpu,
            gpu_ids=picker_form.gpu_ids(on_gpu, self.gpus.value, [g.index for g in self._gpus]) if here else None,
            num_processes=self.processes.value * machines, num_machines=machines,
            machine_rank=self.machine_rank.value if here else 0,
            main_process_ip=(self.main_ip.value.strip() or None) if here else None,
            main_process_port=(self.port.value or None) if here else None,
            mixed_precision=self.mixed_precision.value, gradient_accumulation_steps=self.accumulation.value,
            per_device_batch_size=self.batch_size.value or None,
        )

    def _show(self) -> None:
        """Render the effective batch size and the message area."""
        config = self._config
        self.effective.value = picker_form.effective_batch_html(config)
        lines = [f"<span style='color:#555'>{html.escape(n)}</span>" for n in self._notes]
        lines += [f"<span style='color:#b00020'>⚠ {html.escape(p)}</span>" for p in self._problems]
        if config is not None:
            engine = "" if self.engine.value == _DDP else ENGINES[self.engine.value].title
            described = html.escape(picker_summary.describe(config, engine))
            lines.append(f"<span style='color:#1b5e20'>✓ {described}</span>")
        self.message.value = "<br>".join(lines)
        self._refresh_static_view()

    # ----------------------------------------------------------------- display
    def _summary(self) -> tuple[str, str]:
        """The static view (HTML, plain text) of the form as it is now."""
        engine = "" if self.engine.value == _DDP else ENGINES[self.engine.value].title
        args = (self._config, self._problems, engine, self.path.value.strip())
        return picker_summary.summary_html(*args), picker_summary.summary_text(*args)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None, **kwargs: Any) -> dict[str, Any]:
        """The widget view, with a short note instead of the widget's raw ``repr`` where it cannot render."""
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = picker_summary.FORM_NOTE
        bundle["text/html"] = f"<i>{html.escape(picker_summary.FORM_NOTE)}</i>"
        return bundle

    def _ipython_display_(self) -> None:
        """Show the form, then the summary of its configuration and the YAML it would write, as a second output
        that follows every change (a plain output: a saved notebook or an export shows it without the kernel)."""
        from IPython.display import display  # late: only a displayed picker needs IPython.display

        display(self._repr_mimebundle_(), raw=True)
        html_text, plain = self._summary()
        self._shown_summary = plain
        self._display_handle = display({"text/html": html_text, "text/plain": plain}, raw=True, display_id=True)

    def _refresh_static_view(self) -> None:
        """Bring the displayed summary up to date (after every change of the form)."""
        if self._display_handle is None:
            return
        html_text, plain = self._summary()
        if plain != self._shown_summary:
            self._shown_summary = plain
            self._display_handle.update({"text/html": html_text, "text/plain": plain}, raw=True)

    def __repr__(self) -> str:
        """The plain-text summary (not the widget tree)."""
        return self._summary()[1]

    # ----------------------------------------------------------------- buttons
    def _target(self, path: PathLike | None) -> Path:
        if path is not None:
            return config_file_path(path)
        if not self.path.value.strip():
            raise ConfigError(["file: no path given; type one in the File field"])
        return config_file_path(self.path.value.strip(), "file")

    def _guarded(self, verb: str, action: Callable[[], object]) -> None:
        """Run a button's action, showing a ConfigError inline instead of raising it into the front end."""
        try:
            action()
        except ConfigError as e:
            self._notes = [f"{verb} failed: {p}" for p in e.problems]
            self._show()

