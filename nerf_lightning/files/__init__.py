"""Layer ``files``: files the package writes and reads: atomic writes (:mod:`.atomic`), full disks as one
error (:mod:`.space`) and remembered content digests (:mod:`.digests`).

Imports nothing from the package: every layer may import it.
"""

from nerf_lightning.files.atomic import (
    FolderExistsError,
    PendingFile,
    atomic_folder,
    atomic_path,
    atomic_torch_save,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    is_temporary,
)
from nerf_lightning.files.digests import DigestMemo, FileDigest, file_sha256, hash_file
from nerf_lightning.files.space import DiskFullError, check_space, find_disk_full, free_bytes

__all__ = [
    "DigestMemo",
    "DiskFullError",
    "FileDigest",
    "FolderExistsError",
    "PendingFile",
    "atomic_folder",
    "atomic_path",
    "atomic_torch_save",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_space",
    "file_sha256",
    "find_disk_full",
    "free_bytes",
    "hash_file",
    "is_temporary",
]
