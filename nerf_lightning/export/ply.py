"""Binary PLY (little endian) meshes and point clouds, written atomically, and read back.

Written layout: ``element vertex V`` with ``float x, y, z``, optionally ``float nx, ny, nz``,
optionally ``uchar red, green, blue``; then, for meshes, ``element face F`` with
``property list uchar int vertex_indices`` (triangles, counter-clockwise seen from outside).
Every mesh viewer and library (MeshLab, Blender, Open3D, trimesh, plyfile) reads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nerf_lightning.files import atomic_write

_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}


def write_ply(path: Path, vertices: np.ndarray, colors: np.ndarray | None = None,
              normals: np.ndarray | None = None, faces: np.ndarray | None = None,
              comments: list[str] | None = None) -> None:
    """Write a binary little-endian PLY atomically (:func:`~nerf_lightning.files.atomic_write`).

    Args:
        vertices: ``[V, 3]`` positions (stored as float32).
        colors: ``[V, 3]`` uint8 RGB, or ``None``.
        normals: ``[V, 3]`` unit normals (float32), or ``None``.
        faces: ``[F, 3]`` vertex indices of triangles, or ``None`` for a point cloud.
        comments: header comment lines.
    """
    vertices = np.asarray(vertices, dtype=np.float32).reshape(-1, 3)
    fields: list[tuple[str, str]] = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    header_props = ["property float x", "property float y", "property float z"]
    if normals is not None:
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
        header_props += ["property float nx", "property float ny", "property float nz"]
    if colors is not None:
        fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        header_props += ["property uchar red", "property uchar green", "property uchar blue"]
    table = np.empty(len(vertices), dtype=np.dtype(fields))
    table["x"], table["y"], table["z"] = vertices.T
    if normals is not None:
        normals = np.asarray(normals, dtype=np.float32).reshape(-1, 3)
        table["nx"], table["ny"], table["nz"] = normals.T
    if colors is not None:
        colors = np.asarray(colors).reshape(-1, 3)
        if colors.dtype != np.uint8:
            raise ValueError(f"colors: expected uint8, got {colors.dtype}")
        table["red"], table["green"], table["blue"] = colors.T
    lines = ["ply", "format binary_little_endian 1.0", *(f"comment {c}" for c in comments or [])]
    lines += [f"element vertex {len(vertices)}", *header_props]
    face_table = None
    if faces is not None:
        faces = np.asarray(faces).reshape(-1, 3)
        face_table = np.empty(len(faces), dtype=np.dtype([("count", "u1"), ("indices", "<i4", (3,))]))
        face_table["count"] = 3
        face_table["indices"] = faces
        lines += [f"element face {len(faces)}", "property list uchar int vertex_indices"]
    lines.append("end_header")
    with atomic_write(path) as handle:
        handle.write(("\n".join(lines) + "\n").encode("ascii"))
        handle.write(table.tobytes())
        if face_table is not None:
            handle.write(face_table.tobytes())


def read_ply(path: Path) -> dict[str, np.ndarray]:
    """Read a binary little-endian PLY of vertices (scalar properties) and optional triangle faces.

    Returns ``{"vertices": [V, 3] float32, "faces": [F, 3] int64 (meshes), "colors": [V, 3] uint8
    (when present), "normals": [V, 3] float32 (when present)}`` plus every vertex property by name
    under ``"vertex/NAME"``.
    """
    data = Path(path).read_bytes()
    end = data.find(b"end_header\n")
    if not data.startswith(b"ply\n") or end < 0:
        raise ValueError(f"{path}: not a PLY file")
    header = data[:end].decode("ascii").splitlines()
    if "format binary_little_endian 1.0" not in header:
        raise ValueError(f"{path}: only binary little-endian PLY files are read")
    elements: list[tuple[str, int, list[list[str]]]] = []
    for line in header:
        words = line.split()
        if words and words[0] == "element":
            elements.append((words[1], int(words[2]), []))
        elif words and words[0] == "property":
            elements[-1][2].append(words[1:])
    offset = end + len(b"end_header\n")
    result: dict[str, np.ndarray] = {}
    for name, count, props in elements:
        if all(p[0] != "list" for p in props):
            dtype = np.dtype([(p[1], "<" + _TYPES[p[0]]) for p in props])
            table = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
            offset += dtype.itemsize * count
            if name == "vertex":
                xyz = np.stack([table["x"], table["y"], table["z"]], axis=-1)
                result["vertices"] = xyz.astype(np.float32)
                for field in dtype.names or ():
                    result[f"vertex/{field}"] = np.array(table[field])
                if {"red", "green", "blue"} <= set(dtype.names or ()):
                    result["colors"] = np.stack([table["red"], table["green"], table["blue"]], axis=-1)
                if {"nx", "ny", "nz"} <= set(dtype.names or ()):
                    result["normals"] = np.stack([table["nx"], table["ny"], table["nz"]], axis=-1)
        elif name == "face" and len(props) == 1 and props[0][0] == "list":
            count_type, index_type = "<" + _TYPES[props[0][1]], "<" + _TYPES[props[0][2]]
            dtype = np.dtype([("count", count_type), ("indices", index_type, (3,))])
            table = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
            if count and not bool((table["count"] == 3).all()):
                raise ValueError(f"{path}: only triangle faces are read")
            offset += dtype.itemsize * count
            result["faces"] = table["indices"].astype(np.int64)
        else:
            raise ValueError(f"{path}: cannot read element {name!r}")
    return result
