"""What the dynamic batcher's priority queue costs (not a timed test).

In one process per block, the model runner of a checkout (this one, or
``--baseline DIR``: a checkout from before priority levels) runs a tiny
batching model (FP32 x [N, 16] -> y = 2x + 1, ``max_batch_size`` 8, one
instance, ``max_queue_delay_microseconds`` 0) for ``--clients`` threads
sending one-row requests for ``--seconds``; blocks alternate checkouts, the
order flipped every round, for ``--rounds`` rounds. Cells: ``one queue``
(no levels: the same config on both sides) and, on this checkout only,
``2 levels + policy`` (priority_levels 2, requests at both levels, a
max_queue_size and a queue timeout that never fire). Prints each block's
requests/s, the medians and their ratio to the baseline's one queue.

``--ops``: instead, the queue's own work per request (push, the batcher's
scans of a one-item queue, remove) against the deque it replaced, single
thread, best of 5 x 100,000 (less noisy than whole requests on a shared
machine).

    .venv/bin/python bench/batcher.py --baseline /tmp/main-checkout [--seconds 3] [--rounds 5] [--clients 8]
    .venv/bin/python bench/batcher.py --ops
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(root: str, cell: str, seconds: float, clients: int) -> None:
    """One block: requests/s of ``clients`` threads on the runner of checkout ``root`` (printed as JSON)."""
    sys.path.insert(0, root)
    import threading
    import time

    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from inference.runtime.execution import BatchingPolicy, RunTarget
    from inference.runtime.onnx import OnnxModel
    from inference.runtime.runner import ModelRunner

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["t"]), helper.make_node("Add", ["t", "offset"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [
            helper.make_tensor("scale", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("offset", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    payload = model.SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    runner = ModelRunner(
        lambda t: OnnxModel(ort.InferenceSession(payload, options, providers=["CPUExecutionProvider"]))
    )
    kwargs, schedules = {}, [None]
    if cell == "levels":
        from inference.runtime.queue_policy import PriorityLevels, QueuePolicy, Schedule

        policy = QueuePolicy(timeout_us=60_000_000, max_size=10_000)
        kwargs["levels"] = PriorityLevels(2, 2, policy, ((1, policy),))
        schedules = [Schedule(1), Schedule(2)]
    target = RunTarget("affine", 1, "sha", "affine", 100, batching=BatchingPolicy(8, **kwargs))
    x = np.ones((1, 16), dtype=np.float32)
    extra = (lambda i: (None, None, schedules[i % len(schedules)])) if cell == "levels" else (lambda i: ())
    runner.run(target, {"x": x}, ["y"], 1)
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        while time.monotonic() < stop:
            runner.run(target, {"x": x}, ["y"], 1, *extra(index))
            counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"rps": sum(counts) / seconds}))


def queue_ops() -> None:
    """The PriorityQueue's work per request against a deque's (see the module doc)."""
    import timeit
    from collections import deque

    sys.path.insert(0, str(ROOT))
    from inference.runtime.queue_policy import ONE_QUEUE, PriorityQueue

    class Item:
        __slots__ = ("deadline", "delayed", "expires", "level", "rejects")

        def __init__(self):
            self.deadline = None

    queue, plain = PriorityQueue(ONE_QUEUE, "m"), deque()

    def ours():
        item = Item()
        queue.push(item, None)
        _ = bool(queue), queue.first(), [x for x in queue if x.deadline is not None], queue.expire(0.0)
        queue.remove(item)

    def before():
        item = Item()
        plain.append(item)
        _ = bool(plain), plain[0], [x for x in plain if x.deadline is not None]
        plain.remove(item)

    for _ in range(3):
        a, b = (min(timeit.repeat(f, number=100_000, repeat=5)) / 100_000 * 1e6 for f in (ours, before))
        print(f"priority queue {a:.2f} us, deque {b:.2f} us: {a - b:.2f} us more per request")


def block(root: Path, cell: str, args) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, __file__, "--child", str(root), "--cell", cell]
    command += ["--seconds", str(args.seconds), "--clients", str(args.clients)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env, cwd=root).stdout
    return json.loads(out.strip().splitlines()[-1])["rps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=False)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--child", default="")
    parser.add_argument("--cell", default="one")
    parser.add_argument("--ops", action="store_true")
    args = parser.parse_args()
    if args.ops:
        queue_ops()
        return
    if args.child:
        child(args.child, args.cell, args.seconds, args.clients)
        return
    sides = [("this, one queue", ROOT, "one"), ("this, 2 levels + policy", ROOT, "levels")]
    if args.baseline:
        sides.append(("baseline, one queue", args.baseline.resolve(), "one"))
    results: dict[str, list[float]] = {name: [] for name, _, _ in sides}
    for round_number in range(args.rounds):
        order = sides if round_number % 2 == 0 else sides[::-1]
        for name, root, cell in order:
            rps = block(root, cell, args)
            results[name].append(rps)
            print(f"round {round_number + 1}: {name}: {rps:,.0f} req/s", flush=True)
    base = statistics.median(results["baseline, one queue"]) if args.baseline else None
    print("\n| cell | median req/s | vs baseline |\n|---|---|---|")
    for name, values in results.items():
        median = statistics.median(values)
        ratio = f"{median / base:.3f}" if base else "-"
        print(f"| {name} | {median:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()
