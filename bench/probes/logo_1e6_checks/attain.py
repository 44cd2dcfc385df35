import sys, numpy as np, scipy.ndimage as ndi
sys.argv=['x','counts']; sys.path.insert(0,'bench/probes')
import logo_1e6_stages as L
from qora.phase import analysis
from qora.phase.envelope import _Supports
pats, mask, truth = L.variants()
steps=_Supports(np,ndi,2)
total=pats[0][~mask].sum()
x0=L.fixed(pats[0],mask,truth)[0]
for ph in (0,1e7,1e6):
    I=pats[ph]
    for g in (0,3):
        s=ndi.binary_dilation(truth,iterations=g) if g else truth
        x=L.fixed(I,mask,s,seeds=(0,))[0]
        out=[]
        for thr in (0.15,0.25):
          for sig in (0.5,1.0,2.0):
            sw=steps.shrinkwrap(x[None],s[None],sig,thr)[0]
            iou,cov,pur=L.best_overlap(sw,truth)
            out.append(f"thr{thr}/sig{sig}: {int(sw.sum())} px IoU {iou:.2f} cov {cov:.2f}")
        # mass outside true support share
        tt=ndi.binary_dilation(truth,iterations=0) if True else None
        print(f"{ph:.0e} support true+{g}: R {analysis.amplitude_rfactor(x,I,mask):.3f}; "+"; ".join(out),flush=True)
