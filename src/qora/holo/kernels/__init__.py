"""Launchers of the kernels in ``holo.cu``: one per kernel, keyword arguments, launch configuration inside.

Each launcher loads its kernel through :func:`qora.backend.kernels.get_kernel` (the one loader:
the module is compiled once per device) and launches it on the current CuPy stream. Scalars are
cast here to the kernel's C types (``int`` -> int32, ``long long`` -> int64, ``float`` -> float32);
a null pointer (an optional array) is ``None``. Each docstring names the array-code function whose
result the kernel reproduces (the CPU reference its tests compare with).

Nothing here allocates or synchronises; the stages of :mod:`qora.holo.cuda_stages`,
:mod:`qora.holo.cuda_solver` and :mod:`qora.holo.bpm_cuda` own the buffers.
"""

from __future__ import annotations

import numpy as np

from qora.backend.kernels import get_kernel, multiprocessors

THREADS = 256
FUSED_PLANES = 4  # planes per thread of the fused FGP kernel (its #define in holo.cu)
ELEMENTWISE_PER_SM = 16  # grid-stride kernels: at most this many blocks per multiprocessor (2,112 on an H200)
FLAG_PER_SM = 8  # the non-finite flag's grid-stride blocks per multiprocessor

_NULL = np.uint64(0)


def kernel(name: str):
    """The compiled kernel ``name`` of ``holo.cu``."""
    return get_kernel("qora.holo", "holo.cu", name)


def blocks(total: int, threads: int = THREADS) -> int:
    """Blocks of ``threads`` covering ``total`` items (at least one)."""
    return max(1, -(-int(total) // threads))


def grid_limit(per_sm: int = ELEMENTWISE_PER_SM) -> int:
    """The most blocks a grid-stride kernel launches on the current device: ``per_sm`` per multiprocessor (the
    device's own count, read once per device: 132 on an H200, 108 on an A100)."""
    return per_sm * multiprocessors()


def _elementwise(total: int):
    return (min(blocks(total), grid_limit()),)


def _or_null(a):
    return _NULL if a is None else a


def _i32(*values):
    return tuple(np.int32(v) for v in values)


def _plane_grid(nz: int, ny: int, nx: int, bx: int, by: int, planes: int = 1):
    return (blocks(nx, bx), blocks(ny, by), blocks(nz, planes))


# -- fields -----------------------------------------------------------------------------------------


def crop_window(*, spectra, big, rows, cols, pupil, n, count, sign, out) -> None:
    """The sideband window of ``count`` half spectra (R2C of N x N holograms) times the pupil, with the
    centre-origin sign, into ``out`` (count, n, n). Reference: :meth:`qora.holo.plans.CropPlan.__call__`."""
    kernel("crop_window")((blocks(count * n * n),), (THREADS,),
                          (spectra, np.int32(big), rows, cols, pupil, np.int32(n), np.int32(count), np.float32(sign),
                           out))


def flag_nonfinite(*, x, quads, flag) -> None:
    """flag = 1 where a float4 quad of ``x`` holds a non-finite value. Reference: the finiteness check of
    :func:`qora.holo.plans.stack_holograms`."""
    kernel("flag_nonfinite")((min(blocks(quads), grid_limit(FLAG_PER_SM)),), (THREADS,), (x, np.int64(quads), flag))


# -- first order --------------------------------------------------------------------------------------


def born_write(*, num, den, total, out) -> None:
    """out = num / den - 1 (``den`` None: num - 1). Reference: :func:`qora.holo.odt.first_order` ("born")."""
    kernel("born_write")((blocks(total),), (THREADS,), (num, _or_null(den), np.int64(total), out))


def unwrap_divergence(*, num, den, count, m, n, psi, v) -> None:
    """The wrapped phase psi of num / den and the divergence of its wrapped gradient, written in Makhoul's
    order for the DCT by FFT. Reference: :func:`qora.holo.unwrap.unwrap` (its right-hand side)."""
    kernel("unwrap_divergence")((blocks(m * n), count), (THREADS,), (num, _or_null(den), *_i32(m, n), psi, v))


def unwrap_poisson(*, v, count, m, n, w) -> None:
    """The Neumann Poisson division and the exact inverse DCT's twiddles on the spectra v into w.
    Reference: :func:`qora.holo.unwrap.unwrap` (the DCT solve, :func:`qora.holo.unwrap.dct`)."""
    kernel("unwrap_poisson")((blocks(m * n), count), (THREADS,), (v, *_i32(m, n), w))


def unwrap_congruence(*, psi, solved, count, m, n, scale, sums) -> None:
    """Per image, the block sums of the congruence step (the 2 pi multiple). Reference:
    :func:`qora.holo.unwrap.unwrap` (congruence with the wrapped phase)."""
    kernel("unwrap_congruence")((blocks(m * n), count), (THREADS,),
                                (psi, solved, *_i32(m, n), np.float32(scale), sums))


def unwrap_border(*, psi, solved, count, m, n, scale, sums) -> None:
    """Per image, the sums over the border pixels (the border rule). Reference: :func:`qora.holo.unwrap.rytov`."""
    kernel("unwrap_border")((blocks(2 * (m + n) - 4), count), (THREADS,),
                            (psi, solved, *_i32(m, n), np.float32(scale), sums))


def rytov_write(*, num, den, psi, solved, count, m, n, scale, sums, out) -> None:
    """out = log|num / den| + i (unwrapped phase, border mean removed). Reference: :func:`qora.holo.unwrap.rytov`."""
    kernel("rytov_write")((blocks(m * n), count), (THREADS,),
                          (num, _or_null(den), psi, solved, *_i32(m, n), np.float32(scale), sums, out))


# -- mapping ------------------------------------------------------------------------------------------


def map_scatter(*, spectra, source, target, factor, entries, sums, hits) -> None:
    """sums[target] += factor spectra[source], hits[target] += 1 (atomics, a thread per entry).
    Reference: :meth:`qora.holo.plans.MappingPlan.__call__` (before the division by the hits)."""
    kernel("map_scatter")((blocks(entries),), (THREADS,), (spectra, source, target, factor, np.int64(entries),
                                                           sums, hits))


def map_gather(*, spectra, column_start, source, plane, factor, columns, sums, hits) -> None:
    """The same sums and hits by gather: a thread per lateral column of the volume, no atomics.
    Reference: :meth:`qora.holo.plans.MappingPlan.__call__` (before the division by the hits)."""
    kernel("map_gather")((blocks(columns, 128),), (128,),
                         (spectra, column_start, source, plane, factor, np.int32(columns), sums, hits))


# -- Gerchberg-Papoulis ---------------------------------------------------------------------------------


def gp_counts(*, hits, n, counts, row=None) -> None:
    """counts = M(k) + M(-k) on the half spectrum, in rows of ``row`` values (default n / 2 + 1). Reference:
    :func:`qora.holo.odt.gerchberg_papoulis_r2c` (b)."""
    row = n // 2 + 1 if row is None else row
    kernel("gp_counts")((blocks(n * n * (n // 2 + 1)),), (THREADS,), (hits, np.int32(n), counts, np.int32(row)))


def normalise_hits(*, sums, hits, total) -> None:
    """sums /= hits where hit. Reference: :meth:`qora.holo.plans.MappingPlan.__call__` (the average)."""
    kernel("normalise_hits")((blocks(total),), (THREADS,), (sums, hits, np.int64(total)))


def gp_data(*, data, n, a, row=None) -> None:
    """a = (P(k) + conj P(-k)) / 2 on the half spectrum, in rows of ``row`` values (default n / 2 + 1).
    Reference: :func:`qora.holo.odt.gerchberg_papoulis_r2c` (a)."""
    row = n // 2 + 1 if row is None else row
    kernel("gp_data")((blocks(n * n * (n // 2 + 1)),), (THREADS,), (data, np.int32(n), a, np.int32(row)))


def restore_half(*, e, a, counts, pairs) -> None:
    """E = a + b E on the padded half spectrum. Reference: :func:`qora.holo.odt.gerchberg_papoulis_r2c`."""
    kernel("restore_half")(_elementwise(pairs), (THREADS,), (e, a, counts, np.int64(pairs)))


def clamp_real(*, v, quads, scale, bounds=(0.0, np.inf)) -> None:
    """v = clamp(scale v, *bounds) on a real volume (float4 quads). Reference:
    :func:`qora.holo.odt.gerchberg_papoulis_r2c`."""
    kernel("clamp_real")(_elementwise(quads), (THREADS,), (v, np.int64(quads), np.float32(scale), *_f32(*bounds)))


def clamp_complex(*, v, total, scale, bounds=(0.0, np.inf), keep_imag: bool = False) -> None:
    """v = clamp(Re(scale v), *bounds) (+ i max(Im(scale v), 0) with ``keep_imag``). Reference:
    :func:`qora.holo.odt.constrain` in :func:`qora.holo.odt.gerchberg_papoulis`."""
    kernel("clamp_complex")(_elementwise(total), (THREADS,),
                            (v, np.int64(total), np.float32(scale), *_f32(*bounds), np.int32(bool(keep_imag))))


def restore_complex(*, e, data, hits, total) -> None:
    """E = data where measured. Reference: :func:`qora.holo.odt.gerchberg_papoulis`."""
    kernel("restore_complex")(_elementwise(total), (THREADS,), (e, data, hits, np.int64(total)))


def index_real(*, v, total, scale, medium2, inv_k02) -> None:
    """v = Re sqrt(n_m^2 + scale v / k0^2) in place. Reference: :func:`qora.holo.odt.index_from_potential`."""
    kernel("index_real")(_elementwise(total), (THREADS,),
                         (v, np.int64(total), np.float32(scale), np.float32(medium2), np.float32(inv_k02)))


def index_complex(*, v, total, scale, medium2, inv_k02, out, out_imag=None) -> None:
    """out = Re sqrt(n_m^2 + scale v / k0^2) of a complex potential, and Im into ``out_imag`` when given.
    Reference: :func:`qora.holo.odt.index_from_potential` (``complex_index``)."""
    kernel("index_complex")(_elementwise(total), (THREADS,),
                            (v, np.int64(total), np.float32(scale), np.float32(medium2), np.float32(inv_k02), out,
                             _or_null(out_imag)))


def index_parts(*, re, im, total, medium2, inv_k02) -> None:
    """In place: re = Re n, im = Im n of the potential re + i im. Reference: :func:`qora.holo.odt.index_from_potential`
    (``complex_index``)."""
    kernel("index_parts")(_elementwise(total), (THREADS,),
                          (re, im, np.int64(total), np.float32(medium2), np.float32(inv_k02)))


# -- the field-of-view box and FISTA-TV --------------------------------------------------------------------


def box_restrict(*, padded, n, rl, nb, lo, scale, box) -> None:
    """The central nb^3 box of a padded real volume (edge n, rows of rl floats), times scale.
    Reference: :meth:`qora.holo.odt.FieldOfView.crop`."""
    kernel("box_restrict")((blocks(nb**3),), (THREADS,), (padded, *_i32(n, rl, nb, lo), np.float32(scale), box))


def box_expand(*, box, n, rl, nb, lo, padded) -> None:
    """The box placed in a zero padded real volume. Reference: :meth:`qora.holo.odt.FieldOfView.expand`."""
    kernel("box_expand")((blocks(n * n * rl),), (THREADS,), (box, *_i32(n, rl, nb, lo), padded))


def box_restrict_complex(*, grid, n, nb, lo, scale, re, im) -> None:
    """The central nb^3 box of a complex volume (edge n) times scale, as its two real parts. Reference:
    :meth:`qora.holo.odt.FieldOfView.crop`."""
    kernel("box_restrict_complex")((blocks(nb**3),), (THREADS,), (grid, *_i32(n, nb, lo), np.float32(scale), re, im))


def box_expand_complex(*, re, im, n, nb, lo, grid) -> None:
    """The box re + i im placed in a zero complex volume of edge n. Reference: :meth:`qora.holo.odt.FieldOfView.expand`."""
    kernel("box_expand_complex")((blocks(n**3),), (THREADS,), (re, im, *_i32(n, nb, lo), grid))


def misfit_half(*, e, a, counts, n, out) -> None:
    """out += the misfit of the half spectrum e against the data a (counts = M(k) + M(-k)), up to a constant.
    Reference: :func:`qora.holo.regularisation.misfit` (differences of it)."""
    kernel("misfit_half")(_elementwise(n * n * (n // 2 + 1)), (THREADS,), (e, a, counts, np.int32(n), out))


def misfit_complex(*, e, data, hits, total, out) -> None:
    """out += sum over measured bins of |e - data|^2. Reference: :func:`qora.holo.regularisation.misfit`."""
    kernel("misfit_complex")(_elementwise(total), (THREADS,), (e, data, hits, np.int64(total), out))


def _f32(*values):
    return tuple(np.float32(v) for v in values)


def _tv_args(v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum):
    return (v, r, p, r_next, *_i32(nz, ny, nx), np.float32(lam), *_f32(*bounds), np.float32(step),
            np.float32(momentum))


def fgp_fused(*, v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum) -> None:
    """One FGP iteration (primal point, dual step, projection, momentum) in one kernel, FUSED_PLANES
    planes per thread. Reference: :func:`qora.holo.tv.fgp_prox` (one iteration)."""
    kernel("fgp_fused")(_plane_grid(nz, ny, nx, 64, 4, FUSED_PLANES), (64, 4, 1),
                        _tv_args(v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum))


def fgp_cube(*, v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum) -> None:
    """One FGP iteration on 16 x 8 x 4 shared-memory tiles. Reference: :func:`qora.holo.tv.fgp_prox`."""
    kernel("fgp_cube")(_plane_grid(nz, ny, nx, 16, 8, 4), (16, 8, 4),
                       _tv_args(v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum))


def fgp_march(*, v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum) -> None:
    """One FGP iteration, 32 x 8 threads marching through 8 planes. Reference: :func:`qora.holo.tv.fgp_prox`."""
    kernel("fgp_march")(_plane_grid(nz, ny, nx, 32, 8, 8), (32, 8, 1),
                        _tv_args(v, r, p, r_next, nz, ny, nx, lam, bounds, step, momentum))


def fgp_primal(*, v, r, nz, ny, nx, lam, bounds, out) -> None:
    """out = max(v - lam D^T r, 0) (or without the clamp). Reference: :func:`qora.holo.tv.fgp_prox`
    (the primal point) with :func:`qora.holo.tv.gradient_adjoint`."""
    kernel("fgp_primal")(_plane_grid(nz, ny, nx, 32, 8), (32, 8, 1),
                         (v, r, *_i32(nz, ny, nx), np.float32(lam), *_f32(*bounds), out))


def fgp_dual(*, z, r, p, r_next, nz, ny, nx, step, momentum) -> None:
    """The dual step, projection and momentum from the primal point z. Reference: :func:`qora.holo.tv.fgp_prox`
    with :func:`qora.holo.tv.gradient`."""
    kernel("fgp_dual")(_plane_grid(nz, ny, nx, 32, 8), (32, 8, 1),
                       (z, r, p, r_next, *_i32(nz, ny, nx), np.float32(step), np.float32(momentum)))


def fista_step(*, v, p, nz, ny, nx, lam, bounds, momentum, x_prev, y) -> None:
    """x = prox result of v for the dual p; y = x + momentum (x - x_prev); x_prev = x. Reference:
    :func:`qora.holo.odt.fista_tv` (its outer step)."""
    kernel("fista_step")((blocks(nx, 32), blocks(ny, 8), nz), (32, 8, 1),
                         (v, p, *_i32(nz, ny, nx), np.float32(lam), *_f32(*bounds), np.float32(momentum),
                          x_prev, y))


# -- beam propagation --------------------------------------------------------------------------------------


def bpm_screens(*, x, nz, n, kd, screens) -> None:
    """The thin screens exp(i k0 d x_k), laterally in FFT layout. Reference: ``qora.holo.bpm._prepare``."""
    kernel("bpm_screens")((blocks(nz * n * n),), (THREADS,), (x, *_i32(nz, n), np.float32(kd), screens))


def bpm_screen(*, w, screen, total, n2, scale, stored) -> None:
    """w = screen * scale w (w_k stored first unless ``stored`` is None). Reference:
    ``qora.holo.bpm._forward_chunk`` (one slice's screen)."""
    kernel("bpm_screen")((blocks(total),), (THREADS,),
                         (w, screen, np.int64(total), np.int32(n2), np.float32(scale), _or_null(stored)))


def bpm_propagate(*, a, tq, tr, total, s) -> None:
    """S = tq A + tr S. Reference: ``qora.holo.bpm._forward_chunk`` (one slice's propagation)."""
    kernel("bpm_propagate")((blocks(total),), (THREADS,), (a, tq, tr, np.int64(total), s))


def bpm_output(*, w, total, n, scale, out) -> None:
    """The field ratios, centre-origin, from the last envelope. Reference: :func:`qora.holo.bpm.bpm_forward`."""
    kernel("bpm_output")((blocks(total),), (THREADS,), (w, np.int64(total), np.int32(n), np.float32(scale), out))


def bpm_residual(*, w, data, total, n, scale, loss) -> None:
    """r = scale w - data (in place; scale 0: w is r already) and loss += sum |r|^2. Reference:
    :func:`qora.holo.bpm.bpm_gradient` (the residual and loss)."""
    kernel("bpm_residual")((blocks(total),), (THREADS,),
                           (w, data, np.int64(total), np.int32(n), np.float32(scale), loss))


def bpm_split(*, g, carry, tq, tr, total, scale, h) -> None:
    """The adjoint of one propagation step (``carry`` None on the last slice). Reference:
    ``qora.holo.bpm._reverse``."""
    kernel("bpm_split")((blocks(total),), (THREADS,), (g, _or_null(carry), tq, tr, np.int64(total),
                                                        np.float32(scale), h))


def bpm_gradient(*, screen, stored, b, count, n2, kd, grad) -> None:
    """grad += kd sum over the chunk's illuminations of Im(conj(p w) b), a thread per pixel. Reference:
    ``qora.holo.bpm._reverse`` (one slice's gradient)."""
    kernel("bpm_gradient")((blocks(n2),), (THREADS,), (screen, stored, b, np.int32(count), np.int32(n2),
                                                        np.float32(kd), grad))
