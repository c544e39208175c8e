"""``odradek dump-log --files F1,F2``: kafka-dump-log (Kafka's DumpLogSegments).

Prints what a partition directory's files hold, read-only, with Kafka's line formats:

* ``.log`` segments: one line per batch (``baseOffset: 0 lastOffset: 2 count: 3 ...
  isvalid: true``); with ``--deep-iteration`` a ``| offset: ...`` line per record; with
  ``--print-data-log`` its key and payload too (as UTF-8 text), or with
  ``--offsets-decoder`` the ``__consumer_offsets`` record decoded to JSON.
* ``.index`` (``offset: N position: P``) and ``.timeindex`` (``timestamp: T offset: O``),
  each entry checked against the segment's ``.log`` when it is there; mismatches are listed
  on stderr after everything, in Kafka's words. ``--index-sanity-check`` only runs the check
  the broker runs when it opens an index.
* ``.snapshot`` producer-state snapshots, ``.txnindex`` aborted-transaction indexes, and
  (an odradek addition) ``leader-epoch-checkpoint`` files.

A file that is corrupt is printed as far as it can be read, then one ``error: ...`` line
goes to stderr and the exit status is 1; the other files are still dumped.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import click

from odradek.cli.dump_log_segment import INT_MAX
from odradek.cli.errors import CliError


@dataclass(frozen=True)
class Options:
    print_data: bool
    deep: bool
    offsets_decoder: bool
    skip_record_metadata: bool
    max_bytes: int
    index_sanity_only: bool
    verify_only: bool


@dataclass
class Findings:
    """Problems Kafka's tool reports on stderr after dumping every file."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def print(self, err: TextIO) -> None:
        for name, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{name}\n")
            for index_offset, log_offset in pairs:
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for name, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{name}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for name, pairs in self.out_of_order.items():
            err.write(f"Found out of order timestamp in :{name}\n")
            for index_ts, previous in pairs:
                err.write(
                    f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}\n"
                )
        for pairs in self.not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for index_offset, log_offset in pairs:
                err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for name, pairs in self.non_consecutive.items():
            if pairs:
                err.write(f"Non-consecutive offsets in {name}\n")
                for first, second in pairs:
                    err.write(f"  {first} is followed by {second}\n")


class DumpError(Exception):
    """A file could not be read (all of it): reported as one line, the dump goes on."""


def dump_file(path: Path, opts: Options, out: TextIO, findings: Findings) -> None:
    from odradek.cli import dump_log_files as files
    from odradek.cli.dump_log_segment import dump_segment

    out.write(f"Dumping {path}\n")
    name = path.name
    if name == "leader-epoch-checkpoint":
        files.dump_leader_epochs(path, out)
        return
    suffix = name[name.rfind(".") :] if "." in name else ""
    if suffix == ".log":
        dump_segment(path, opts, out, findings)
    elif suffix == ".index":
        files.dump_offset_index(path, opts, out, findings)
    elif suffix == ".timeindex":
        files.dump_time_index(path, opts, out, findings)
    elif suffix == ".snapshot":
        files.dump_producer_snapshot(path, out)
    elif suffix == ".txnindex":
        files.dump_txn_index(path, out)
    else:
        out.flush()
        click.echo(f"Ignoring unknown file {path}", err=True)


@click.command("dump-log")
@click.option(
    "--files",
    required=True,
    metavar="FILE1,FILE2,...",
    help="Comma-separated data and index files to dump.",
)
@click.option("--print-data-log", is_flag=True, help="Print record keys and values.")
@click.option("--deep-iteration", is_flag=True, help="Print every record, not just batches.")
@click.option(
    "--offsets-decoder",
    is_flag=True,
    help="Decode records as __consumer_offsets group and offset records.",
)
@click.option("--skip-record-metadata", is_flag=True, help="Leave out record metadata.")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=0),
    default=INT_MAX,
    help="Read at most this many bytes of each .log file.",
)
@click.option(
    "--index-sanity-check",
    is_flag=True,
    help="Only check index sanity (as the broker does on startup), without printing entries.",
)
@click.option("--verify-index-only", is_flag=True, help="Only verify the index against the log.")
def dump_log(
    files: str,
    print_data_log: bool,
    deep_iteration: bool,
    offsets_decoder: bool,
    skip_record_metadata: bool,
    max_bytes: int,
    index_sanity_check: bool,
    verify_index_only: bool,
) -> None:
    """Print the contents of log segments, indexes and snapshots (kafka-dump-log)."""
    paths = [Path(p.strip()) for p in files.split(",") if p.strip()]
    if not paths:
        raise CliError("--files names no file")
    print_data = print_data_log or offsets_decoder
    opts = Options(
        print_data=print_data,
        deep=deep_iteration or print_data,
        offsets_decoder=offsets_decoder,
        skip_record_metadata=skip_record_metadata,
        max_bytes=max_bytes,
        index_sanity_only=index_sanity_check,
        verify_only=verify_index_only,
    )
    out = sys.stdout
    findings = Findings()
    failed = False
    for path in paths:
        try:
            dump_file(path, opts, out, findings)
        except DumpError as exc:
            out.flush()
            click.echo(f"error: {path}: {exc}", err=True)
            failed = True
        except OSError as exc:
            out.flush()
            click.echo(f"error: {path}: {exc.strerror or exc}", err=True)
            failed = True
    out.flush()
    findings.print(sys.stderr)
    if failed:
        sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(dump_log)
