"""Scale-out on Dask (``dask.distributed``; needs the ``dask`` extra): many patterns, a holographic
time series, and 4D-STEM fits over G split across workers, on a local cluster of processes, one
worker per GPU, or a running scheduler. docs/scale-out.md.

>>> from qora.distributed import connect, reconstruct_many
>>> with connect(workers=2) as client:                                  # doctest: +SKIP
...     campaign = reconstruct_many(["a.cxi", "b.cxi"], client=client, starts=8)
"""

from qora.distributed.cluster import connect, gpu_count
from qora.distributed.holo import SeriesStore, reconstruct_series
from qora.distributed.items import ItemReport, run_items
from qora.distributed.phase import PhaseCampaign, reconstruct_many
from qora.distributed.ssb import ShardedBand, ShardedSession

__all__ = ["connect", "gpu_count", "run_items", "ItemReport", "reconstruct_many", "PhaseCampaign",
           "reconstruct_series", "SeriesStore", "ShardedSession", "ShardedBand"]
