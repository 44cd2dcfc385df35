import numpy as np
import pytest

from qora.backend.kernels import kernel_source


def test_kernel_sources_are_found_as_package_data():
    src = kernel_source("qora.backend", "stream.cu")
    assert "copy_float4" in src and "scale_inplace" in src


def test_missing_kernel_source_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="no_such_file.cu"):
        kernel_source("qora.backend", "no_such_file.cu")


def test_loading_without_cuda_is_a_clear_error(monkeypatch):
    from qora.backend.kernels import load_module

    monkeypatch.setenv("QORA_DISABLE_CUDA", "1")
    with pytest.raises(RuntimeError, match="CuPy and a GPU"):
        load_module("qora.backend", "stream.cu")


@pytest.mark.gpu
def test_loader_compiles_once_per_device_and_runs(rng):
    from qora.backend import resolve
    from qora.backend.kernels import get_kernel, load_module

    be = resolve("cuda")
    cp = be.xp
    m1 = load_module("qora.backend", "stream.cu")
    m2 = load_module("qora.backend", "stream.cu")
    assert m1 is m2
    copy = m1.get_function("copy_float4")
    a = cp.asarray(rng.standard_normal(4 * 1000).astype(np.float32))
    b = cp.full_like(a, np.nan)
    copy((8,), (128,), (a, b, cp.int64(1000)))
    np.testing.assert_array_equal(b.get(), a.get())


@pytest.mark.gpu
@pytest.mark.parametrize("ctype,dtype", [("float", np.float32), ("double", np.float64)])
def test_templated_kernel(rng, ctype, dtype):
    from qora.backend import resolve
    from qora.backend.kernels import get_kernel

    cp = resolve("cuda").xp
    k = get_kernel("qora.backend", "stream.cu", f"scale_inplace<{ctype}>",
                   name_expressions=("scale_inplace<float>", "scale_inplace<double>"))
    host = rng.standard_normal(1001).astype(dtype)
    x = cp.asarray(host)
    k((4,), (64,), (x, dtype(3.0), cp.int64(x.size)))
    np.testing.assert_allclose(x.get(), 3.0 * host, rtol=1e-6)


def test_the_shared_device_header_is_written_into_each_source_that_includes_it():
    """qora_device.cuh (qora/backend/kernels) is found for an engine that has no header of that name and written in
    place once: cmul, which holo.cu and band.cu each defined, is now defined once in each source's text and
    nowhere else in the engines' files."""
    from pathlib import Path

    import qora

    for package, filename in (("qora.holo", "holo.cu"), ("qora.ssb", "band.cu"), ("qora.ssb", "depth.cu")):
        text = kernel_source(package, filename)
        assert '#include "qora_device.cuh"' not in text
        assert text.count("__device__ __forceinline__ T warp_sum(T v)") == 1, filename
    root = Path(qora.__file__).parent
    defining = [p.relative_to(root).as_posix() for p in root.rglob("*.cu*") if p.suffix in (".cu", ".cuh")
                if "float2 cmul(float2 a, float2 b)" in p.read_text()]
    assert defining == ["backend/kernels/qora_device.cuh"], defining


def test_ssb_launchers_read_their_block_sizes_from_the_kernel_sources():
    """One definition of each block size: the .cu file's; a source without it is refused at import."""
    import pytest

    from qora.ssb import kernels as K

    assert K.BLOCK == {"ssb.cu": 128, "band.cu": 256, "depth.cu": 128, "bslz4.cu": 128}
    with pytest.raises(RuntimeError, match="block size is read from the source"):
        K._source_number("ssb.cu", r"#define NO_SUCH_THING (\d+)")


def _prebuilt_modules():
    from qora.holo import build_fused as holo
    from qora.phase import build_fused as phase

    return {"phase fused_fft": phase.MODULE, "holo bpm_fused": holo.MODULE, "holo bpm_resident": holo.RESIDENT,
            "holo gp_fused": holo.GP}


@pytest.mark.parametrize("name", sorted(_prebuilt_modules()))
def test_every_prebuilt_cubin_is_built_from_its_current_sources(name):
    """Each shipped sm_90 cubin exists and was built from its .cu file and headers as they are now (else:
    ``python -m qora.<engine>.build_fused --mathdx ...``)."""
    module = _prebuilt_modules()[name]
    assert module.cubin().stat().st_size > 0
    assert module.built_digest() == module.source_digest(), f"{name}: rebuild with python -m ...build_fused"
