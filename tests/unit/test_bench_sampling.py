"""tests.bench.sampling: py-spy's raw stacks sorted into what each thread was doing."""

from __future__ import annotations

import pytest

from tests.bench import sampling

WORKER = "_bootstrap (/usr/lib/python3.11/threading.py:1002);_worker (/x/concurrent/futures/thread.py:83)"
TASK = f"{WORKER};run (/x/concurrent/futures/thread.py:58)"
RAW = [
    f"{WORKER};get (/x/queue.py:171) 40\n",  # an idle pool thread
    f"{TASK};_act (engine/drain/passes.py:224);evict_pod (engine/kube/client.py:211);"
    "getresponse (/x/http/client.py:1390);read (/x/ssl.py:1166) 30\n",
    f"{TASK};_act (engine/drain/passes.py:224);_request (engine/kube/client.py:235);"
    "acquire (engine/kube/ratelimit.py:40) 20\n",
    "_run (/srv/scalebot/engine/runner.py:170);run_pass (engine/drain/passes.py:150);"
    "from_raw (engine/domain/model.py:90) 8\n",
    "_run (engine/operations/runner.py:170);wait (engine/domain/clock.py:30) 2\n",
    "garbage line without a count\n",
]


def test_qualified_names_of_newer_py_spy_are_sorted_the_same() -> None:
    # py-spy 0.4.2+ prints `Class.method`; the categories match on the method's own name.
    qualified = [
        "Thread._bootstrap (/x/threading.py:1002);_worker (/x/concurrent/futures/thread.py:83);"
        "_WorkItem.run (/x/concurrent/futures/thread.py:58);HTTPConnection.getresponse "
        "(/x/http/client.py:1390) 5\n",
        "Thread._bootstrap (/x/threading.py:1002);_worker (/x/concurrent/futures/thread.py:83);"
        "SimpleQueue.get (/x/queue.py:171) 7\n",
    ]
    busy, idle = (stack for stack, _ in sampling.parse_raw(qualified))
    assert sampling.category(busy).startswith("waiting for the API server")
    assert sampling.category(idle).startswith("worker threads idle")
    assert sampling.unqualified("OperationPlan.summary.<locals>.<genexpr> (a.py:1)") == "<genexpr> (a.py:1)"


def test_a_stack_line_is_split_into_frames_and_a_count() -> None:
    stacks = sampling.parse_raw(RAW)
    assert len(stacks) == 5
    frames, count = stacks[0]
    assert count == 40 and frames[-1] == "get (/x/queue.py:171)"
    assert sampling.Frame.parse(frames[-1]) == sampling.Frame("get", "/x/queue.py", "171")


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, "worker threads idle"),
        (1, "waiting for the API server"),
        (2, "client-side rate limiter"),
        (3, "running Python"),
        (4, "runner and main thread waiting"),
    ],
)
def test_each_sample_is_sorted_by_what_its_thread_was_doing(index: int, expected: str) -> None:
    stack, _ = sampling.parse_raw(RAW)[index]
    assert sampling.category(stack).startswith(expected)


def test_the_summary_counts_thread_seconds_and_ranks_own_code_without_idle_threads() -> None:
    summary = sampling.summarize(sampling.parse_raw(RAW), rate_hz=10)
    assert summary["samples"] == 100
    assert summary["thread_seconds"] == pytest.approx(10.0)
    shares = {name.split(" (")[0]: share for name, _, share in summary["by_category"]}
    assert shares["worker threads idle, waiting for work"] == pytest.approx(0.4)
    own = {name: seconds for name, seconds, _ in summary["own_functions"]}
    # Idle workers and the runner's wait are left out; the rest goes to the innermost own frame.
    assert own == {
        "evict_pod (engine/kube/client.py)": pytest.approx(3.0),
        "acquire (engine/kube/ratelimit.py)": pytest.approx(2.0),
        "from_raw (engine/domain/model.py)": pytest.approx(0.8),
    }
    assert [name for name, *_ in summary["cpu_leaves"]] == ["from_raw (engine/domain/model.py)"]
    text = "\n".join(sampling.render(summary))
    assert "100 samples at 10 Hz" in text and "evict_pod (engine/kube/client.py)" in text
