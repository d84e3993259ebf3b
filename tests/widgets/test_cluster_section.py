"""The picker's "where it runs" section: a Ray cluster in the form becomes the config's cluster: section and back,
its bad values are the form's problems, and the cluster's nodes show only when this kernel joined it."""

from __future__ import annotations

from typing import Any

from notebook_accel.cluster import RayCluster
from notebook_accel.widgets.ray_section import RAY, cluster_html
from notebook_accel.widgets.config_picker import ConfigPicker


def test_a_ray_cluster_in_the_form_is_the_configs_cluster_section_and_back() -> None:
    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = RAY
    picker.processes.value = 16  # workers on the cluster: not bounded by this machine's 2 cores
    picker.cluster.sections["ray"].gpu.value = True
    picker.cluster.sections["ray"].cpus.value = 8
    picker.cluster.sections["ray"].placement.value = "spread"
    picker.cluster.sections["ray"].address.value = "ray://head:10001"
    config = picker.config
    assert config.num_processes == 16 and config.num_machines == 1 and not config.use_cpu
    assert config.cluster == RayCluster(address="ray://head:10001", resources_per_worker={"CPU": 8.0, "GPU": 1.0},
                                        placement="spread")
    again = ConfigPicker(config, cpu_count=2, gpus=[])
    assert again.cluster.on_cluster and again.processes.value == 16 and again.config.cluster == config.cluster
    assert again.device.layout.display == "none" and again.machines.layout.display == "none"


def test_keep_warm_and_the_way_back_are_in_the_form_and_only_a_change_reaches_the_config() -> None:
    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = RAY
    ray = picker.cluster.sections["ray"]
    assert picker.config.cluster == RayCluster()
    assert "keep_warm" not in ray.section(None) and "back_channel" not in ray.section(None)  # defaults stay out
    ray.keep_warm.value = 0.0
    ray.back_channel.value = "relay"
    config = picker.config
    assert config.cluster == RayCluster(keep_warm=0.0, back_channel="relay")
    again = ConfigPicker(config, cpu_count=2, gpus=[])
    assert again.cluster.sections["ray"].keep_warm.value == 0.0
    assert again.cluster.sections["ray"].back_channel.value == "relay"


def test_back_on_this_machine_the_section_goes_and_the_bounds_return() -> None:
    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = RAY
    picker.processes.value = 8
    picker.cluster.where.value = "This machine"
    assert picker.config.cluster is None and picker.processes.value == 2
    assert "cluster" not in picker.config.extra


def test_a_bad_cluster_value_is_a_problem_naming_it() -> None:
    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = RAY
    picker.cluster.sections["ray"].cpus.value = -1
    assert any("cluster:" in p and "'CPU': -1.0" in p for p in picker.problems), picker.problems


class _Joined:
    def is_initialized(self) -> bool:
        return True

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 8.0, "GPU": 2.0}},
                {"Alive": False, "NodeManagerAddress": "10.0.0.9", "Resources": {"CPU": 8.0}}]

    def available_resources(self) -> dict[str, float]:
        return {"CPU": 6.0, "GPU": 1.0}


def test_the_cluster_shows_its_live_nodes_only_once_joined() -> None:
    assert "not connected" in cluster_html(None)
    shown = cluster_html(_Joined())
    assert "1 node(s); free now: 6 CPUs, 1 GPUs" in shown and "10.0.0.1" in shown and "10.0.0.9" not in shown


def test_slurm_in_the_form_is_the_configs_cluster_section_and_shows_the_allocation() -> None:
    from notebook_accel.cluster.slurm import SlurmCluster
    from notebook_accel.widgets.slurm_section import allocation_html

    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = "Slurm"
    picker.processes.value = 8
    picker.cluster.sections["slurm"].gpus.value = 4
    config = picker.config
    assert config.cluster == SlurmCluster(gpus_per_node=4) and not config.use_cpu
    again = ConfigPicker(config, cpu_count=2, gpus=[])
    assert again.cluster.where.value == "Slurm" and again.config.cluster == config.cluster
    assert "not in a Slurm allocation" in allocation_html({})
    shown = allocation_html({"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"})
    assert "77" in shown and "gpu[1-2]" in shown and "8(x2)" in shown


def test_slurms_keep_warm_is_in_the_form_and_only_a_change_reaches_the_config() -> None:
    from notebook_accel.cluster.slurm import SlurmCluster

    picker = ConfigPicker(cpu_count=2, gpus=[])
    picker.cluster.where.value = "Slurm"
    slurm = picker.cluster.sections["slurm"]
    assert "keep_warm" not in slurm.section(None) and picker.config.cluster == SlurmCluster()  # the default stays out
    slurm.keep_warm.value = 0.0
    config = picker.config
    assert config.cluster == SlurmCluster(keep_warm=0.0)
    assert ConfigPicker(config, cpu_count=2, gpus=[]).cluster.sections["slurm"].keep_warm.value == 0.0
