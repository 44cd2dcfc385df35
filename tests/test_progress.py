"""The command line's progress: one bar for a whole run, whatever the stages."""

import io
import time

from qora.progress import report, tqdm_progress


def test_one_bar_for_a_run_of_many_stages_and_starts():
    out = io.StringIO()
    total = 8 * 30
    with tqdm_progress(file=out, mininterval=0) as bar:
        done = 0
        for start in range(8):
            for stage, n in (("HIO", 20), ("ER", 10)):
                for _ in range(n // 5):
                    done += 5
                    assert report(bar, f"start {start + 1} of 8: {stage}", done, total, {"error": 0.1})
        assert bar._bar.n == total and bar._bar.total == total
    # one bar, redrawn in place (carriage returns, no new lines), which ended at 100%
    text = out.getvalue()
    assert "100%" in text and "start 8 of 8: ER" in text and text.rstrip("\n").count("\n") == 0


def test_the_rate_is_the_run_average_not_a_burst():
    out = io.StringIO()
    with tqdm_progress(file=out, mininterval=0) as bar:
        bar("HIO", 0, 1000, {})
        time.sleep(0.05)
        bar("HIO", 1000, 1000, {})  # a replayed graph reports 1000 iterations at once
        rate = bar._bar.format_dict["rate"] or bar._bar.n / bar._bar.format_dict["elapsed"]
    assert rate < 1000 / 0.04  # the average over the run, not 1000 iterations per microsecond


def test_a_new_total_restarts_the_count_on_the_same_bar():
    with tqdm_progress(file=io.StringIO()) as bar:
        bar("search", 10, 10, {})
        first = bar._bar
        bar("newton", 1, 20, {})
        assert bar._bar is first and first.total == 20 and first.n == 1
