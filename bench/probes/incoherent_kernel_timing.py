"""The incoherent model's transfers kernel at full scale without the ssb-full dataset (issue 38): the 8,765
bright-field pixels and 44,247 band frequencies of ``qora bench ssb-full``'s geometry (300 kV, 30 mrad,
192^2 detector, 512^2 scan at 0.373 A) with random G, timed per block as IncoherentBand runs them: the
transfers (order 0 and 2, complex128) and the products, and their sum over the band's blocks.

    python bench/probes/incoherent_kernel_timing.py
"""

import time

import numpy as np

from qora.backend import resolve
from qora.ssb import kernels
from qora.ssb.depth import KERNEL_BLOCK_BYTES, kernel_bytes_per_row
from qora.ssb.optics import wavelength


def main(sections: int = 5) -> None:
    be = resolve("cuda")
    xp = be.xp
    lam = wavelength(300.0)
    alpha = 30e-3 / lam  # 1/A
    dk = alpha / 52.8  # the bright field ~106 px across: 8,765 pixels, as ssb-full's
    ky, kx = np.meshgrid(np.arange(-54, 55) * dk, np.arange(-54, 55) * dk, indexing="ij")
    inside = np.hypot(ky, kx) <= alpha
    k = xp.asarray(np.stack([ky[inside], kx[inside]], 1))
    nbf = len(k)
    q = np.fft.fftfreq(512, 0.373)
    qy, qx = np.meshgrid(q, q[:257], indexing="ij")
    keep = (np.hypot(qy, qx) >= 0.2) & (np.hypot(qy, qx) <= 0.9)
    qy, qx = xp.asarray(qy[keep]), xp.asarray(qx[keep])
    nq = int(qy.size)
    rng = np.random.default_rng(0)
    names = ("C10", "C12a", "C12b", "thickness")
    args = dict(k=k, wavelength=lam, limit=alpha, coefficients=[100.0, 5.0, -3.0], thickness=120.0, parameters=names,
                sections=sections)
    print(f"{nq} Q x {nbf} k, {sections} sections", flush=True)
    for order in (0, 2):
        P = 0 if order == 0 else len(names)
        L = 1 if order == 0 else 15
        rows = min(nq, KERNEL_BLOCK_BYTES // kernel_bytes_per_row(nbf, sections, P, 16))
        X = xp.empty((rows, L, sections, nbf), np.complex128)
        G = xp.asarray((rng.standard_normal((rows, nbf)) + 1j * rng.standard_normal((rows, nbf))).astype(np.complex64))

        def transfers():
            kernels.incoherent_transfers(qy=qy[:rows], qx=qx[:rows], order=order, out=X, **args)

        def products():
            Y = xp.concatenate([G.astype(X.dtype)[:, None, :], X[:, 0]], axis=1)
            xp.conj(X.reshape(rows, L * sections, nbf) @ xp.swapaxes(xp.conj(Y), 1, 2))
            if order:
                Tp = X[:, 1:1 + P].reshape(rows, P * sections, nbf)
                xp.conj(Tp @ xp.swapaxes(xp.conj(Tp), 1, 2))

        times = {}
        for name, fn in (("transfers", transfers), ("products", products)):
            fn()
            be.synchronize()
            samples = []
            for _ in range(5):
                t0 = time.perf_counter()
                fn()
                be.synchronize()
                samples.append(time.perf_counter() - t0)
            times[name] = float(np.median(samples))
        blocks = -(-nq // rows)
        print(f"order {order}: blocks of {rows} Q ({blocks}); transfers {times['transfers'] * 1e3:.2f} ms "
              f"({X.nbytes / times['transfers'] / 1e9:.0f} GB/s stored), products {times['products'] * 1e3:.2f} ms; "
              f"the band's blocks {blocks * (times['transfers'] + times['products']) * 1e3:.0f} ms", flush=True)
        del X, G


if __name__ == "__main__":
    main()
