"""Scrape a broker's Prometheus endpoint and read samples by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        # sample name -> [(labels, value)]
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append((sample.labels, sample.value))

    def value(self, name: str, default: float | None = None, **labels: str) -> float:
        """The one sample of ``name`` whose labels are exactly ``labels``."""
        for sample_labels, value in self.samples.get(name, []):
            if sample_labels == labels:
                return value
        if default is not None:
            return default
        raise KeyError(f"no sample {name}{labels}; have {self.samples.get(name)}")

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return self.samples.get(name, [])

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(
            value
            for sample_labels, value in self.samples.get(name, [])
            if all(sample_labels.get(k) == v for k, v in labels.items())
        )


def scrape(port: int, timeout: float = 10) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as answer:
        return Scrape(answer.read().decode())
