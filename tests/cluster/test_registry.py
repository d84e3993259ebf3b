"""The placements' registry: every place that needs to know a placement asks it, so a new one is one spec.

A made-up placement registered for one test reaches ``check_cluster`` (its name, its YAML ``kind``), the device
count, the header's words and the CLI's flags without any other change, and the package itself imports no cluster
client or torch to list the placements."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass

import pytest

from notebook_accel.cluster import RayCluster, check_cluster, cluster_devices, cluster_label, registry, spec_named
from notebook_accel.cluster.registry import PlacementSpec, add_cluster_flags, cluster_from_flags
from notebook_accel.errors import LaunchError


@dataclass(frozen=True)
class _Toy:
    slots: int = 2

    @property
    def uses_gpu(self) -> bool:
        return False

    def describe(self) -> str:
        return f"toy cluster with {self.slots} slots"


def _toy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--toy_slots", type=int, default=None)


TOY = PlacementSpec(
    name="toy", title="Toy cluster", cluster_class=_Toy, fields=("slots",), placement_path="nowhere:Nothing",
    picker_path="nowhere:Nothing", starting=" on the toy cluster",
    devices=lambda cluster, n, use_cpu: (["cpu"] * n, "gloo"), label=lambda cluster: f"Toy cluster ({cluster.slots})",
    add_flags=_toy_flags, from_flags=lambda base, args: _Toy(args.toy_slots or (base.slots if base else 2)))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> PlacementSpec:
    monkeypatch.setattr(registry, "SPEC_PATHS", (*registry.SPEC_PATHS, f"{__name__}:TOY"))
    return TOY


def test_a_registered_placement_is_known_everywhere_by_its_spec_alone(toy: PlacementSpec) -> None:
    assert spec_named("TOY") is toy and check_cluster("toy") == _Toy()
    assert check_cluster({"kind": "toy", "slots": 4}) == _Toy(4)
    assert check_cluster({"kind": "ray", "placement": "spread"}) == RayCluster(placement="spread")
    assert cluster_devices(_Toy(), 3, None, None, 1) == (["cpu"] * 3, "gloo")
    assert cluster_label(_Toy(5)) == "Toy cluster (5)" and cluster_label(None) == ""
    with pytest.raises(LaunchError, match="unknown keys \\['nodes'\\]; the keys are kind, slots"):
        check_cluster({"kind": "toy", "nodes": 2})
    with pytest.raises(LaunchError, match="gpu_ids=\\[0\\] with a cluster is not allowed: the Toy cluster"):
        cluster_devices(_Toy(), 2, [0], None, 1)


def test_the_cli_offers_every_placement_and_its_own_flags(toy: PlacementSpec) -> None:
    parser = argparse.ArgumentParser()
    add_cluster_flags(lambda p, name, **kw: p.add_argument(f"--{name}", dest=name, **kw), parser)
    args = parser.parse_args(["--cluster", "toy", "--toy_slots", "7"])
    assert cluster_from_flags(None, args) == _Toy(7)
    ray = parser.parse_args(["--cluster", "ray", "--ray_address", "ray://h:10001", "--gpus_per_worker", "1"])
    assert cluster_from_flags(None, ray) == RayCluster(address="ray://h:10001", keep_warm=0.0,
                                                       resources_per_worker={"CPU": 1.0, "GPU": 1.0})
    assert cluster_from_flags(RayCluster(placement="spread"), parser.parse_args([])).placement == "spread"
    assert cluster_from_flags(None, parser.parse_args([])) is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--cluster", "nowhere"])


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(LaunchError, match="cluster kind 'yarn' is not supported; use kind: ray"):
        check_cluster({"kind": "yarn"})
    with pytest.raises(LaunchError, match="cluster=5 is not allowed; use None \\(this machine\\), 'ray'"):
        check_cluster(5)


def test_listing_the_placements_imports_no_torch_and_no_ray() -> None:
    code = ("import sys; from notebook_accel.cluster import specs; specs(); "
            "print(sorted(m for m in ('torch', 'ray', 'notebook_accel.launcher') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
