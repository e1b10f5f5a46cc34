"""`surreal probe progress`: wait until a learner reports progress on its /metrics endpoint.

The Helm chart's `helm test` hook runs this in a pod of the release (replay image: no torch), and the chart's
wiring test runs the same command against a learner on loopback. It polls the learner's Prometheus endpoint
until `surreal_learner_updates` reaches `--min-updates`, printing what it sees, and exits 0; it exits 1 when
`--timeout-s` passes first. An unreachable endpoint is not an error until then: the learner may still be
starting (pulling its image, loading torch, waiting for a GPU node).
"""

from __future__ import annotations

import argparse
import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

UPDATES = "surreal_learner_updates"
SHOWN = {
    "surreal_learner_env_steps": "env_steps",
    UPDATES: "updates",
    "surreal_learner_param_version": "version",
    "surreal_learner_train_return_mean": "train_return_mean",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the learner's metrics URL, e.g. http://learner:9100/metrics")
    parser.add_argument("--min-updates", type=int, default=1, help="updates the learner must have done (default 1)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="give up after this long (default 600)")
    parser.add_argument("--interval-s", type=float, default=5.0, help="time between polls (default 5)")


def read_learner(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """The learner's progress gauges by short name (env_steps, updates, ...) from one scrape."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (an http URL we are given)
        text = response.read().decode("utf-8")
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SHOWN:
                found[SHOWN[sample.name]] = float(sample.value)
    return found


def wait_for_progress(
    url: str,
    min_updates: int,
    timeout_s: float,
    interval_s: float,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Poll `url` until the learner has done `min_updates` updates (True) or `timeout_s` passed (False)."""
    deadline = clock() + timeout_s
    while True:
        try:
            seen = read_learner(url, timeout_s=min(5.0, max(interval_s, 0.5)))
        except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError) as exc:
            say(f"learner metrics not reachable yet at {url}: {exc}")
        else:
            if "updates" not in seen:
                say(f"{url} serves no {UPDATES}: is it a learner's metrics endpoint?")
            else:
                say("learner: " + " ".join(f"{k}={v:g}" for k, v in seen.items()))
                if seen["updates"] >= min_updates:
                    say(f"progress: {seen['updates']:g} updates >= {min_updates}")
                    return True
        if clock() + interval_s > deadline:
            say(f"no progress within {timeout_s:g} s: the learner has not done {min_updates} update(s)")
            return False
        sleep(interval_s)


def main(args: argparse.Namespace) -> int:
    ok = wait_for_progress(args.url, args.min_updates, args.timeout_s, args.interval_s, say=_say)
    return 0 if ok else 1


def _say(line: str) -> None:
    print(f"[surreal probe] {line}", flush=True)
