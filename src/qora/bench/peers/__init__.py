"""Standalone peer implementations, run in the peers' environment (``bench/peers-env.sh``).

These files import only their peer library and NumPy: they are executed as
scripts by another interpreter, never imported by qora.
"""
