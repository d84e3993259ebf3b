"""The allowed values of the config's choice fields, as ``Literal`` types (checked at run time from these)."""

from __future__ import annotations

from typing import Literal

__all__ = ["ComputeEnvironment", "DistributedType", "MixedPrecision", "RdzvBackend"]

ComputeEnvironment = Literal["LOCAL_MACHINE"]
DistributedType = Literal["NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED"]
MixedPrecision = Literal["no", "fp16", "bf16", "fp8"]
RdzvBackend = Literal["static", "c10d", "etcd", "etcd-v2"]
