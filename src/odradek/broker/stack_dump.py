"""Stack dumps on demand, as ``jstack`` gives for a JVM broker: ``kill -USR1 <pid>``
prints every thread's stack, ``kill -USR2 <pid>`` every asyncio task's, to stderr. The
task dump ends with the garbage collector's state (objects frozen at start-up, objects a
full collection would scan, collections so far), since a full collection is the likeliest
cause of a pause of tens of milliseconds on the event loop.

A broker that will not stop or answer is usually blocked in one task or one thread;
the dump names it without a debugger. SIGUSR1 works even while the event loop is
blocked (faulthandler writes from the signal handler itself); SIGUSR2 needs the loop.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import io
import signal
import sys


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Register both dumps (main thread only: signal handlers live there)."""
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    loop.add_signal_handler(signal.SIGUSR2, dump_tasks)


def dump_tasks() -> None:
    """Write every pending task's name and stack to stderr in one write."""
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"--- {len(tasks)} asyncio tasks ---\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        task.print_stack(limit=12, file=out)
    collections = ", ".join(str(stats["collections"]) for stats in gc.get_stats())
    out.write(
        f"gc: {gc.get_freeze_count()} objects frozen, {len(gc.get_objects(2))} in the "
        f"oldest generation, collections per generation {collections}\n"
    )
    out.write("--- end of tasks ---\n")
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()
