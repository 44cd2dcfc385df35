"""``python -m qora`` and the ``qora`` console script.

The command line is imported here, inside the entry point, with Ctrl-C held back until it has loaded (the
engines take about half a second to import): a Ctrl-C in that time ends the command as every Ctrl-C does,
with one line and status 130. It printed a KeyboardInterrupt traceback and died of the signal, or, caught by
an import's bare ``except``, was lost and the command ran to the end (found by bench/probes/bad_inputs.py).
"""

import signal
import sys


def main(argv=None) -> None:
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        from qora.cli.root import main as run
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        sys.stderr.write("Interrupted: stopped while starting (nothing done)\n")
        raise SystemExit(130)
    run(argv)


if __name__ == "__main__":
    main()
