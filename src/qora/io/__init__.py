"""Readers and writers shared by the engines; every result is written atomically."""

from qora.io.atomic import atomic_path

__all__ = ["atomic_path"]
