"""Benchmarks: one module per engine, run by ``qora bench <name>``.

:mod:`qora.bench.common` is the harness they share (timing, floors, results);
:mod:`qora.bench.registry` lists the cases each benchmark's result must hold.
"""
