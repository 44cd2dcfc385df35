"""Property tests of the 4D-STEM readers: whatever array (shape, dtype, NaN, Inf) or whatever damaged
bytes a file holds, reading it (and making a Session of it) gives the data back or a
FileFormatError/InputError that names the file (or the parameter), never another exception."""

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from qora.io.errors import FileFormatError, InputError
from qora.ssb import Session, load_data, read_dataset

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = st.sampled_from([np.float32, np.float64, np.int16, np.uint16, np.uint8, np.complex64, np.bool_])


@st.composite
def stacks(draw):
    """Arrays of 1 to 5 axes of up to 6 (4D ones more often), of numbers with NaN and Inf."""
    ndim = draw(st.sampled_from([1, 2, 3, 4, 4, 4, 5]))
    shape = draw(array_shapes(min_dims=ndim, max_dims=ndim, min_side=0, max_side=6))
    dtype = draw(DTYPES)
    floats = st.floats(allow_nan=True, allow_infinity=True, width=32) if np.dtype(dtype).kind in "fc" else None
    return draw(arrays(dtype, shape, elements=floats))


def _check(path, read):
    """The read's result, or None when it refused with a message naming the file."""
    try:
        return read(path)
    except FileFormatError as exc:
        assert str(path) in str(exc), exc
        return None


def _session(data):
    """A Session of what was read: made, or an InputError naming what is wrong."""
    try:
        Session(data, kv=300.0, alpha_mrad=20.0, scan_step=0.4, backend="cpu")
    except InputError as exc:
        assert str(exc)


@SETTINGS
@given(a=stacks())
def test_npy_of_any_array(tmp_path, a):
    path = tmp_path / "x.npy"
    np.save(path, a)
    read = _check(path, load_data)
    good = a.ndim == 4 and a.dtype.kind in "iuf"
    assert (read is not None) == good
    if read is not None:
        np.testing.assert_array_equal(np.asarray(read[0]), a)
        _session(read[0])


@SETTINGS
@given(a=stacks())
def test_qora_h5_of_any_array(tmp_path, a):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.attrs.update(qora_kind="ssb_dataset", kv=300.0, alpha_mrad=20.0, scan_step_a=0.4, aberrations="{}")
        f["data"] = a
    read = _check(path, load_data)
    assert (read is not None) == (a.ndim == 4 and a.dtype.kind in "iuf")  # complex or bool: refused, named
    if read is not None:
        assert not isinstance(read[0], np.ndarray)  # lazy: a dask array over the open HDF5 dataset
        np.testing.assert_array_equal(np.asarray(read[0]), a)
        _session(read[0])


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    folder = tmp_path_factory.mktemp("orig")
    a = np.random.default_rng(0).random((4, 4, 8, 8)).astype(np.float32)
    np.save(folder / "a.npy", a)
    from qora.ssb import write_dataset

    write_dataset(folder / "a.h5", a, kv=300.0, alpha_mrad=20.0, scan_step=0.4)
    return a, {".npy": (folder / "a.npy").read_bytes(), ".h5": (folder / "a.h5").read_bytes()}


@SETTINGS
@given(suffix=st.sampled_from([".npy", ".h5"]), cut=st.floats(0.0, 1.0), garbage=st.binary(max_size=64),
       where=st.floats(0.0, 1.0), mode=st.sampled_from(["truncate", "overwrite", "garbage only"]))
def test_damaged_bytes(tmp_path, originals, suffix, cut, garbage, where, mode):
    a, raw = originals
    raw = raw[suffix]
    if mode == "truncate":
        damaged = raw[:int(cut * len(raw))]
    elif mode == "overwrite":
        at = int(where * len(raw))
        damaged = raw[:at] + garbage + raw[at + len(garbage):]
    else:
        damaged = garbage
    path = tmp_path / f"x{suffix}"
    path.write_bytes(damaged)
    try:
        read = _check(path, load_data)
    except InputError as exc:  # metadata damaged into a value out of range
        assert str(exc)
        return
    if read is not None:
        assert read[0].shape == a.shape or read[0].ndim == 4
        if damaged == raw:
            np.testing.assert_array_equal(np.asarray(read[0]), a)
        _session(read[0])


def test_read_dataset_refuses_other_kinds_naming_them(tmp_path):
    with h5py.File(tmp_path / "r.h5", "w") as f:
        f.attrs["qora_kind"] = "phase_result"
        f["object"] = np.zeros((4, 4))
    with pytest.raises(FileFormatError, match=r"r\.h5: not a qora 4D-STEM dataset \(qora_kind='phase_result'\); "
                                              r"it holds object \(4, 4\)"):
        read_dataset(tmp_path / "r.h5")
