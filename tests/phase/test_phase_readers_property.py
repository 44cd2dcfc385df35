"""Property tests of the pattern readers: any array of any shape and dtype (NaN and Inf included)
in any format, and any truncated, corrupted or garbage file, gives a correct read, or a
FileFormatError / InputError naming the file; never another exception. A read pattern then goes
through the solver's checks, which refuse it with an InputError or accept it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qora.io.errors import FileFormatError, InputError
from qora.io.patterns import load_mask, load_pattern
from qora.phase.checks import check_intensity

SETTINGS = settings(max_examples=50, deadline=None, derandomize=True)
DTYPES = [np.float32, np.float64, np.int16, np.uint8, np.uint16, np.int32, np.bool_, np.complex64]
SUFFIXES = [".npy", ".npz", ".h5", ".cxi", ".tif"]


def _write(path: Path, a: np.ndarray) -> None:
    suffix = path.suffix
    if suffix == ".npy":
        np.save(path, a)
    elif suffix == ".npz":
        np.savez(path, intensity=a)
    elif suffix in (".h5", ".cxi"):
        with h5py.File(path, "w") as f:
            f.create_dataset("entry_1/data_1/data", data=a)
    else:
        import tifffile

        tifffile.imwrite(path, a)


@st.composite
def arrays(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = (rng.random(shape) * 100 - draw(st.sampled_from([0, 10]))).astype(dtype)
    if np.issubdtype(dtype, np.inexact) and a.size:
        for bad in draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf]), max_size=3)):
            a.flat[int(rng.integers(a.size))] = bad
    return a


def _must_name(path, exc):
    assert isinstance(exc, (FileFormatError, InputError)), f"{type(exc).__name__}: {exc}"
    assert str(path) in str(exc), str(exc)


@SETTINGS
@given(a=arrays(), suffix=st.sampled_from(SUFFIXES))
def test_any_array_in_any_format_reads_or_is_refused_by_name(a, suffix):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"pattern{suffix}"
        try:
            _write(path, a)
        except Exception:  # noqa: BLE001 - a format that cannot store this array: nothing to read
            return
        try:
            data, mask = load_pattern(path)
        except Exception as exc:  # noqa: BLE001
            _must_name(path, exc)
            return
    expected = a[0] if a.ndim == 3 and a.shape[0] == 1 else a
    assert data.dtype == np.float64 and data.ndim in (2, 3) and mask is None
    assert not np.iscomplexobj(a)
    np.testing.assert_array_equal(data, expected.astype(np.float64))
    try:
        intensity, _ = check_intensity(data)
    except InputError:
        assert not np.isfinite(data).all() or (data < 0).any() or not (data > 0).any()
    else:
        assert np.isfinite(intensity).all() and (intensity >= 0).all()


def _good_file(d: Path, suffix: str) -> Path:
    path = d / f"good{suffix}"
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    if suffix == ".edf":
        import fabio

        fabio.edfimage.EdfImage(data=a).write(str(path))
    else:
        _write(path, a)
    return path


@SETTINGS
@given(suffix=st.sampled_from(SUFFIXES + [".edf"]), cut=st.floats(0, 1, exclude_max=True),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4),
       garbage=st.booleans(), junk=st.binary(min_size=0, max_size=64))
def test_truncated_corrupt_or_garbage_files_are_named(suffix, cut, flips, garbage, junk):
    with tempfile.TemporaryDirectory() as d:
        path = _good_file(Path(d), suffix)
        raw = bytearray(path.read_bytes())
        if garbage:
            raw = bytearray(junk)
        else:
            raw = raw[: int(cut * len(raw))] if cut > 0 else raw
            for where, value in flips:
                if raw:
                    raw[int(where * len(raw))] = value
        path.write_bytes(bytes(raw))
        for reader in (load_pattern, load_mask):
            try:
                data = reader(path)
            except Exception as exc:  # noqa: BLE001
                _must_name(path, exc)
            else:
                data = data[0] if reader is load_pattern else data
                assert data.ndim >= 1 and data.dtype in (np.float64, np.bool_)


@pytest.mark.parametrize("suffix", SUFFIXES + [".edf"])
def test_the_untouched_file_reads(tmp_path, suffix):
    data, _ = load_pattern(_good_file(tmp_path, suffix))
    np.testing.assert_array_equal(data, np.arange(64).reshape(8, 8))
