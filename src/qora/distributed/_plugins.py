"""Worker plugins (this module imports Dask: import it only where Dask is in use)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin


class SharedFFTPlans(WorkerPlugin):
    """Loads the client's FFTW wisdom on every worker, those started later included (a worker
    that replaces a dead one), so that all pick the client's algorithms and round alike."""

    name = "qora-fftw-wisdom"

    def __init__(self, wisdom) -> None:
        self.wisdom = wisdom

    def setup(self, worker) -> None:
        from qora.backend.fft import load_fftw_wisdom

        load_fftw_wisdom(self.wisdom)


def share_fft_plans(client) -> None:
    """Give the workers the FFTW plans measured so far in this process (see
    :func:`qora.backend.fft.fftw_wisdom`); a no-op without pyFFTW."""
    from qora.backend.fft import fftw_wisdom

    wisdom = fftw_wisdom()
    if wisdom is not None:
        client.register_plugin(SharedFFTPlans(wisdom))
