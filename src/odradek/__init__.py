"""odradek: a distributed commit log that speaks the Apache Kafka wire protocol."""

import os
import sys
from pathlib import Path

__version__ = "0.1.0"


def _keep_hypothesis_out_of_the_working_directory() -> None:
    """kio imports hypothesis at run time (its types carry test strategies), and
    hypothesis caches a Unicode table under ``./.hypothesis`` of whatever directory the
    process started in: every broker or CLI started somewhere new spent ~4 s of CPU
    rebuilding it and left a ``.hypothesis/`` folder behind. Point that cache at one
    per-user directory instead. A test run that imported hypothesis itself keeps its own
    settings."""
    if "hypothesis" in sys.modules or "HYPOTHESIS_STORAGE_DIRECTORY" in os.environ:
        return
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(cache_home) / "odradek" / "hypothesis")


_keep_hypothesis_out_of_the_working_directory()
