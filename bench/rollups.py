"""What the charts' per-minute rollups cost in-process throughput (not a timed test).

In one process (Django set up on a fresh VAR_DIR and SQLite, the bench's
tiny model imported: FP32 [1, 16], y = 2x + 1), 8 client threads call the
WSGI application with V2 REST binary requests, as granian's threads would,
for ``--seconds`` per block; blocks alternate rollups on and off (the data
plane's statistics recorder with its :class:`~inference.observability.rollups.MinuteRollups`,
or without), the order flipped every round, for ``--rounds`` rounds. The
flush thread writes the open minutes to the database every
``CHART_FLUSH_SECONDS`` (1 s here, ten times the default: the pessimistic
case). Prints each block's requests/s, the medians and their ratio.

    .venv/bin/python bench/rollups.py [--seconds 3] [--rounds 7] [--clients 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = ROOT / "bench" / "work" / "rollups"
WORK.mkdir(parents=True, exist_ok=True)
os.environ["VAR_DIR"] = tempfile.mkdtemp(prefix="var-", dir=WORK)
os.environ["DJANGO_SETTINGS_MODULE"] = "hosting.settings"
os.environ["MODELHOST_WARM_START"] = "0"
os.environ["CHART_FLUSH_SECONDS"] = "1"
os.environ.setdefault("ORT_INTRA_OP_THREADS", "1")
os.environ.setdefault("ORT_INTER_OP_THREADS", "1")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from bench import models as bench_models  # noqa: E402
from bench.profile_hot_path import rest_call  # noqa: E402
from bench.workloads import RestBinary  # noqa: E402

MODEL = bench_models.MODELS["tiny"]


def throughput(call, clients: int, seconds: float) -> tuple[float, float]:
    """(requests per second, CPU microseconds of this process per request) of
    ``clients`` threads calling ``call`` for ``seconds``."""
    stop, counts = threading.Event(), [0] * clients

    def client(i: int) -> None:
        n = 0
        while not stop.is_set():
            call()
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    n = sum(counts)
    return n / (time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6


def added_us(recorder, rollups, calls: int = 200_000) -> float:
    """Microseconds one ``record_success`` takes with rollups minus without
    (single thread, median of 5 alternating timings each)."""
    import timeit

    def time_it(on: bool) -> float:
        recorder.rollups = rollups if on else None
        args = ("bench_only", 1)
        kwargs = dict(rows=1, total_ns=150_000, queue_ns=20_000, input_ns=30_000, infer_ns=80_000, output_ns=20_000,
                      batch_size=1, executed=True)  # fmt: skip
        return timeit.timeit(lambda: recorder.record_success(*args, **kwargs), number=calls) / calls * 1e6

    times = {True: [], False: []}
    for _ in range(5):
        for on in (True, False):
            times[on].append(time_it(on))
    return statistics.median(times[True]) - statistics.median(times[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    repository = WORK / "repository"
    bench_models.write_repository(repository, [MODEL])
    call_command("migrate", verbosity=0)
    call_command("import_repository", str(repository), verbosity=0)
    from hosting.wsgi import application
    from inference.dataplane import get_dataplane
    from inference.models import MinuteRollupRow

    call = rest_call(application, RestBinary().build_request(MODEL, MODEL.sample_inputs(repository)))
    recorder = get_dataplane().statistics
    assert recorder.rollups is not None, "CHART_ROLLUPS is off"
    rollups = recorder.rollups
    throughput(call, args.clients, 2.0)  # warm-up
    results: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    for round_ in range(args.rounds):
        for mode in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
            recorder.rollups = rollups if mode == "on" else None
            rate, us = throughput(call, args.clients, args.seconds)
            results[mode].append(rate)
            cpu[mode].append(us)
        print(
            f"round {round_ + 1}: on {results['on'][-1]:6.0f} req/s {cpu['on'][-1]:6.1f} CPU us/req, "
            f"off {results['off'][-1]:6.0f} req/s {cpu['off'][-1]:6.1f} CPU us/req"
        )
    extra = added_us(recorder, rollups)
    recorder.rollups = rollups
    time.sleep(2.5)  # the last flush
    on, off = statistics.median(results["on"]), statistics.median(results["off"])
    rows = MinuteRollupRow.objects.filter(model_name=MODEL.name)
    written = sum(rows.values_list("successes", flat=True))
    print(f"median: on {on:.0f} req/s, off {off:.0f} req/s, on/off {on / off:.4f} ({(1 - on / off) * 100:+.2f} % cost)")
    ratios = [a / b for a, b in zip(results["on"], results["off"])]
    print(f"median of the rounds' on/off ratios: {statistics.median(ratios):.4f}")
    cpu_on, cpu_off = statistics.median(cpu["on"]), statistics.median(cpu["off"])
    print(f"median CPU per request: on {cpu_on:.1f} us, off {cpu_off:.1f} us ({(cpu_on / cpu_off - 1) * 100:+.2f} %)")
    print(
        f"record_success with rollups minus without: {extra:.2f} us, {extra / cpu_off * 100:.2f} % of a request's CPU"
    )
    print(f"rollups written: {written} requests of {MODEL.name} in {rows.count()} minute rows")


if __name__ == "__main__":
    main()
