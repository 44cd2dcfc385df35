import tempfile, numpy as np
from pathlib import Path
from qora.distributed import connect, ShardedSession
from qora.ssb.agreement import Band
from qora.ssb.files import read_dataset, write_dataset
from qora.ssb.optics import Aberrations
from qora.ssb.session import Session
from qora.ssb.simulate import amorphous_slices, simulate

if __name__ == "__main__":
    sim = simulate(amorphous_slices((96, 96), 0.2, seed=4), pixel=0.2, stride=2, window=48, kv=300.0,
                   alpha_mrad=20.0, aberrations=Aberrations(C10=120.0, C12=(15.0, 0.4)))
    tmp = Path(tempfile.mkdtemp()); path = tmp / "scan.h5"
    write_dataset(path, sim.data, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step)
    with connect(gpus="all") as client:
        print("workers", client.scheduler_info(n_workers=-1)["workers"].__len__(),
              [w.get("nthreads") for w in client.scheduler_info(n_workers=-1)["workers"].values()])
        sh = ShardedSession(str(path), client=client, kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, backend="cuda", shards=2)
        single = Session(read_dataset(path)[0], kv=300.0, alpha_mrad=20.0, scan_step=sim.scan_step, detector=sh.detector,
                         level=sh.level, backend="cuda")
        v = {"C10": 120.0, "C12a": 5.0, "C12b": 3.0, "thickness": 40.0, "tilt_y": 0.001, "tilt_x": 0.0}
        for names in (("C10", "C12a", "C12b"), ("C10", "C12a", "C12b", "thickness", "tilt_y", "tilt_x")):
            a, b = Band(single, names), sh.make_band(names)
            print(names, "total", a.total, b.total, "shape", a.shape, b.shape)
            print("  batch", a.evaluate_batch([v, {**v, "C10": 100.0}]), b.evaluate_batch([v, {**v, "C10": 100.0}]))
            print("  order0", a.evaluate(v, order=0), b.evaluate(v, order=0))
            va, ga, ha = a.evaluate(v); vb, gb, hb = b.evaluate(v)
            print("  order2", va, vb, "grad", ga, gb)
            print("  shard quad flags", [f.result() for f in [client.submit(lambda bd: (bd.quadratic_kernels, bd.G.dtype.str, bd.shape), x) for x in b._bands]])
        sh.close()
