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
    per-user directory instead, and skip hypothesis's plugins. A process that imported
    hypothesis before odradek keeps its own settings; pytest's hypothesis plugin does not
    import it first, so test runs use this directory too, example database included: a
    failing example one checkout saved is replayed by every checkout of the same user."""
    if "hypothesis" in sys.modules:
        return
    # Nor run the "hypothesis" entry points of every installed package on import: trio's
    # (installed with selenium) imports trio and pytest, 0.3-1.7 s of every broker start.
    os.environ.setdefault("HYPOTHESIS_NO_PLUGINS", "1")
    if "HYPOTHESIS_STORAGE_DIRECTORY" in os.environ:
        return
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(cache_home) / "odradek" / "hypothesis")


_keep_hypothesis_out_of_the_working_directory()
