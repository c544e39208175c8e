"""The demo pipeline: website activity through odradek into Spark, Parquet and back to a topic.

``python -m odradek.demo`` runs it (see :mod:`odradek.demo.pipeline` for what it does and
:mod:`odradek.demo.events` for the events).
"""

from odradek.demo.config import DEFAULTS, DemoConfig

__all__ = ["DEFAULTS", "DemoConfig"]
