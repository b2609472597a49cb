"""Layer ``files``: files the package writes and reads: atomic writes (:mod:`.atomic`) and remembered
content digests (:mod:`.digests`).

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

__all__ = [
    "DigestMemo",
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
    "file_sha256",
    "hash_file",
    "is_temporary",
]
