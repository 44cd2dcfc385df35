"""cohere-core's reconstruction of a pattern, run in the peers' cohere environment (benchmark only).

Usage: ``python phase_cohere.py pattern.npz out.npz --starts N [--device -1]``. The input holds
``counts`` (detector layout, q = 0 at n//2) and ``mask`` (True where not measured); the output holds
``objects`` (starts, *shape; centre-origin complex, in qora's transform convention) and ``seconds`` (per
start). The pattern goes to cohere as amplitudes sqrt(counts), the form its phasing loop constrains.
Two conventions differ from ours and are converted here:

- cohere's reciprocal space is the INVERSE transform of its image (``rs = ifft(ds_image)``), ours the
  forward one, so the object in our convention is ``conj(ds_image)`` (|fft(conj y)| = N |ifft(y)|).
  Without it every complex object scores as another object (errors 1.2-1.3 on every case).
- cohere's basic reconstruction (``Rec``) constrains every pixel; only its time-evolving ``TeRec``
  leaves pixels marked -1 free (in ``Rec`` a -1 became a modulus of 1 with the phase flipped).
  Unmeasured pixels therefore go in as 0, as cohere's own preprocessing leaves missing data.

cohere's own example configuration is used (``3*(20*ER + 180*HIO) + 20*ER``, shrinkwrap every
iteration at threshold 0.1 and blur 1 pixel, a starting support of half the array per axis, twin
removal by halves at iteration 2 (3D only: cohere's twin step indexes three axes)).
This file imports nothing from qora: cohere's environment does not have it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

PARAMS = {
    "algorithm_sequence": "3* (20*ER + 180*HIO) + 20*ER",
    "shrink_wrap_trigger": [1, 1],
    "shrink_wrap_type": "GAUSS",
    "shrink_wrap_threshold": 0.1,
    "shrink_wrap_gauss_sigma": 1.0,
    "twin_trigger": [2],
    "twin_halves": [0, 0],
    "hio_beta": 0.9,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pattern")
    parser.add_argument("out")
    parser.add_argument("--starts", type=int, default=1)
    parser.add_argument("--device", type=int, default=-1)
    parser.add_argument("--pkg", default="np")
    args = parser.parse_args(argv)
    from cohere_core.controller import phasing

    data = np.load(args.pattern)
    counts, mask = data["counts"], data["mask"]
    amplitude = np.where(mask, 0.0, np.sqrt(np.maximum(counts, 0))).astype(np.float32)
    objects, seconds = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npy")
        np.save(path, amplitude)
        for start in range(args.starts):
            np.random.seed(start)  # cohere's random start draws from NumPy's global generator
            params = dict(PARAMS, initial_support_area=[0.5] * counts.ndim)
            if counts.ndim != 3:  # cohere's twin step indexes three axes
                params.pop("twin_trigger")
                params.pop("twin_halves")
            t0 = time.perf_counter()
            rec = phasing.create_rec(params, path, args.pkg, args.device, debug=True)
            rec.iterate()
            image = rec.get_image()
            image = np.asarray(image.get() if hasattr(image, "get") else image)  # cohere's CuPy library returns CuPy
            seconds.append(time.perf_counter() - t0)
            objects.append(np.conj(image).astype(np.complex64))
    np.savez(args.out, objects=np.stack(objects), seconds=np.array(seconds))
    print(json.dumps({"starts": args.starts, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
