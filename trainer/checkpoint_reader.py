"""Reading a DCP checkpoint without running anything it holds (docs/architecture.md, "Checkpoints").

torch.distributed.checkpoint keeps its index (``.metadata``) as a plain pickle and the
optimizer's non-tensor values (param groups) as ``torch.save`` pickles inside the shard files,
and its stock reader and planner load both with the full unpickler: a crafted file would run
code on ``--resume``. These subclasses read the index through an unpickler that builds only the
classes DCP's metadata is made of, and the values with ``torch.load(weights_only=True)``;
anything else is refused with a ``CheckpointError`` before it is built. Tensors were already
read with ``weights_only=True`` by DCP itself.
"""

from __future__ import annotations

import enum
import io
import os
import pickle
import re
from typing import IO, Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

from lakehouse.errors import CheckpointError

# What a user can do about a checkpoint whose files are missing or damaged.
DAMAGED = "the checkpoint is damaged: use an earlier one (to --resume from it, move this folder out of checkpoints/)"
_METADATA = "torch.distributed.checkpoint.metadata"
# Every global a DCP index of torch 2.13 refers to (checked against checkpoints of this trainer,
# one process and FSDP2). Each is a data holder or a pure lookup: building one runs no code of
# the file's choosing.
_ALLOWED = {
    (_METADATA, "Metadata"),
    (_METADATA, "StorageMeta"),
    (_METADATA, "MetadataIndex"),
    (_METADATA, "TensorStorageMetadata"),
    (_METADATA, "BytesStorageMetadata"),
    (_METADATA, "ChunkStorageMetadata"),
    (_METADATA, "TensorProperties"),
    (_METADATA, "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # a torch.layout by its name
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib._local", "PosixPath"),  # where Python 3.13 keeps it
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


def _enum_member(owner: Any, name: str) -> enum.Enum:
    """What ``getattr`` may build here: a member of an allowed enum, by its name.

    Some Python 3.11 releases (Debian's 3.11.2 among them) pickle an enum member as
    ``getattr(EnumClass, "NAME")`` where later ones pickle ``EnumClass(value)``; DCP's index holds
    one (``_MEM_FORMAT_ENCODING``). A general ``getattr`` would reach any attribute of any object
    the file builds (a bound method, then called), so only this is served under its name.
    """
    if isinstance(owner, type) and issubclass(owner, enum.Enum) and name in owner.__members__:
        return owner[name]
    owner_name = owner.__name__ if isinstance(owner, type) else type(owner).__name__
    raise pickle.UnpicklingError(f"builtins.getattr of {owner_name}.{name} is not part of a checkpoint's metadata")


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose ``.metadata`` is unpickled through an allow-list."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        try:
            with self.fs.create_stream(path, "rb") as stream:
                metadata = _MetadataUnpickler(stream).load()
        except OSError as exc:
            raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}; {DAMAGED}") from None
        except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError, IndexError) as exc:
            raise CheckpointError(
                f"{path} is not a checkpoint's metadata that can be read safely ({exc}); it was refused "
                "without running it. Load (resume, evaluate, export, serve) only checkpoints your own runs wrote"
            ) from None
        if not isinstance(metadata, Metadata):
            raise CheckpointError(f"{path} holds a {type(metadata).__name__}, not a checkpoint's metadata")
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that reads non-tensor values with ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        loaded = load_plain(value, f"the checkpoint's value {fqn!r}")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def load_plain(source: str | os.PathLike | IO[bytes], what: str) -> Any:
    """``torch.load(source, weights_only=True)``, a refusal as a ``CheckpointError`` naming ``what``.

    torch's own message for a refused global is a page advising ``weights_only=False``, the one
    thing not to do with a file of unknown origin; only what was refused is kept."""
    try:
        return torch.load(source, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"WeightsUnpickler error: (.*?)(?:\.\s|$)", str(exc))
        if found is None:  # not a refusal: the bytes are no pickle at all
            raise CheckpointError(f"{what} cannot be read ({first_line(exc)}); {DAMAGED}") from None
        raise CheckpointError(
            f"{what} is not plain data ({found[1]}); it was refused without running it. Load (resume, evaluate, "
            "export, serve) only checkpoints your own runs wrote"
        ) from None
    except (OSError, EOFError, RuntimeError, ValueError) as exc:  # missing, empty, truncated, not a torch file
        raise CheckpointError(f"{what} cannot be read ({first_line(exc)}); {DAMAGED}") from None


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc``, raised while reading a checkpoint's files, says a file is missing or cut short
    (rather than that the checkpoint holds other keys or shapes than were asked for)."""
    if isinstance(exc, (OSError, EOFError, pickle.UnpicklingError)):
        return True
    # torch's zip reader, on a shard file cut short or overwritten
    return isinstance(exc, RuntimeError) and "PytorchStreamReader" in str(exc)


def first_line(exc: BaseException) -> str:
    """The error's type and first line: torch's messages go on for a page."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
