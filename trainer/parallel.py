"""Process group set-up and FSDP2 sharding, kept apart from the train loop (torchtitan habit)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh | None  # None when running as one plain process

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_world() -> World:
    """Join the process group torchrun set up (NCCL on GPUs, gloo on CPU), or run alone."""
    if "RANK" not in os.environ:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return World(0, 1, 0, device, None)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    return World(dist.get_rank(), dist.get_world_size(), local_rank, device, mesh)


def compute_dtype(requested: str, device: torch.device) -> torch.dtype:
    if requested == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[requested]


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, param_dtype: torch.dtype) -> nn.Module:
    """Shard each transformer block, then the root (embeddings, final norm, output).

    Parameters are kept in float32 and gathered in ``param_dtype``; gradients are reduced in
    float32, so bf16 compute does not cost optimizer precision.
    """
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def apply_compile(model: nn.Module) -> None:
    """Compile each block separately: the blocks are identical, so compile time stays flat in depth."""
    for i, block in enumerate(model.layers):
        model.layers[i] = torch.compile(block)


def all_reduce_sum(value: torch.Tensor, world: World) -> torch.Tensor:
    if world.size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def shutdown(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()
