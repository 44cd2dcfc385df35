import sys, time, numpy as np
sys.argv=['x','counts']
sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import reconstruct, analysis
pats, mask, truth = L.variants()
for ph in (1e6,):
    I = pats[ph]
    t=time.perf_counter()
    res = reconstruct(I, mask=mask, starts=3, backend="cpu", keep_all=True)
    dt=time.perf_counter()-t
    r=[analysis.amplitude_rfactor(o,I,mask) for o in res.objects]
    iou=[analysis.support_iou(s,truth) for s in res.supports]
    print(ph, res.recipe, res.choice[:80], 'R', np.round(r,3), 'IoU', np.round(iou,3), [int(s.sum()) for s in res.supports], 'best', res.best, res.agreement['message'], f'{dt/3:.1f} s/start', flush=True)
