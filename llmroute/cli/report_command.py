"""`llmroute report`: cost-per-feature reports from the ledger, and `--reconcile` against a platform's bill."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Sequence
from llmroute.errors import ConfigError, LLMRouteError
from llmroute.accounting.sinks import read_records
from llmroute.accounting.prices import PriceBook, PricingConfig
from llmroute._runtime.cli_help import with_defaults
from llmroute.accounting.report import FORMATS, GROUP_KEYS, _check_by, _counted, latency_by_length, parse_time, report, to_csv, to_html, to_json, to_length_table, to_table


# ---------------------------------------------------------------------------------------- CLI
def _load_config(path: str) -> tuple[PricingConfig, str | None]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", path=path) from None
    except UnicodeDecodeError as e:  # tomllib decodes the bytes itself
        from llmroute._runtime.text_files import not_utf8  # loaded when this command meets such a file

        raise not_utf8(e, path) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", path=path) from None
    try:
        pricing = PricingConfig.model_validate(doc.get("pricing", {}))
    except Exception as e:  # pydantic.ValidationError
        raise ConfigError(str(e), path=path, key="pricing") from None
    section = doc.get("ledger") if isinstance(doc.get("ledger"), dict) else {}
    ledger = section.get("url") if section.get("sink") == "postgres" else section.get("path")
    if ledger and "${" in ledger:
        ledger = os.path.expandvars(ledger)
    if ledger and not ledger.startswith(("postgresql://", "postgres://")) and not Path(ledger).is_absolute():
        ledger = str(Path(path).parent / ledger)
    return pricing, ledger


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmroute report", description="Cost report from an llmroute ledger.")
    p.add_argument("--ledger", help="ledger file (SQLite or JSONL) or postgresql:// URL; default: [ledger] of --config, "
                                    "else llmroute-ledger.db")  # fmt: skip
    p.add_argument("--by", default="feature", help=f"comma-separated group keys: {','.join(GROUP_KEYS)},metadata.<key>")
    p.add_argument("--since", help="7d, 24h, 30m, or an ISO date/datetime (UTC)")
    p.add_argument("--until", help="same forms as --since")
    p.add_argument("--format", default="table", choices=FORMATS, help="output format")
    p.add_argument("--out", help="write the report here (html default: llmroute-report.html)")
    p.add_argument("--reprice", metavar="KIND[:REGION]", help="price the same traffic at this platform's prices")
    p.add_argument("--config", help="llmroute TOML config, for [pricing] overrides and exchange rates")
    p.add_argument("--include-probes", action="store_true",
                   help="count the probe calls of `llmroute health` and `bench smoke` (left out by default)")
    p.add_argument("--include-shadow", action="store_true",
                   help="count the calls of shadow comparisons, [routing.shadow] (left out by default)")
    p.add_argument("--wide", action="store_true", help="table: every column with full names (wider than 120)")
    p.add_argument("--by-length", action="store_true",
                   help="add latency by input/output token bucket (table, json; always in html)")
    p.add_argument("--reconcile", metavar="FILE",
                   help="compare the ledger per day and model with a platform's usage/billing export (CSV or JSON)")
    p.add_argument("--platform", help="--reconcile: only ledger calls of this provider name or kind")
    p.add_argument("--bill-tz", default="UTC", help="--reconcile: the timezone of the export's days (+08:00 for Bailian)")
    p.add_argument("--tolerance", default="0.01", help="--reconcile: an amount difference still called a match")
    return p


def _reconcile_main(args: argparse.Namespace, ledger: str) -> int:
    """`report --reconcile FILE`: every argument checked, then the export read, then the ledger."""
    from decimal import InvalidOperation

    from llmroute.accounting.reconcile import parse_offset, read_export, reconcile, to_rows, to_text
    from llmroute.cli.paths import check_output

    if args.format not in ("table", "json", "csv"):
        raise ValueError(f"--reconcile prints a table, json or csv, not {args.format}")
    offset = parse_offset(args.bill_tz)
    try:
        tolerance = Decimal(args.tolerance)
    except InvalidOperation:
        raise ValueError(f"--tolerance must be a number, got {args.tolerance!r}") from None
    if not tolerance.is_finite() or tolerance < 0:  # negative: nothing matches; inf: everything; NaN: never
        raise ValueError(f"--tolerance must be a finite amount >= 0, got {args.tolerance!r}")
    check_output(args.out, "--out")
    path = Path(args.reconcile)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise ValueError(f"--reconcile {path}: cannot read: {e.strerror or e}") from None
    export = read_export(text, name=str(path), offset=offset)
    if not export:
        raise ValueError(f"--reconcile {path}: the export has no rows")
    # The ledger is read over the export's days, a day of margin either side for the bill's timezone.
    first = min(r.day for r in export)
    last = max(r.day for r in export)
    since = datetime.fromisoformat(first).replace(tzinfo=timezone.utc).timestamp() - 86400
    until = datetime.fromisoformat(last).replace(tzinfo=timezone.utc).timestamp() + 2 * 86400
    records = (r for r in read_records(ledger, since=since, until=until)
               if _counted(r, args.include_probes, args.include_shadow))
    rows = reconcile(records, export, platform=args.platform, offset=offset, tolerance=tolerance)
    if args.format == "json":
        out = json.dumps(to_rows(rows), ensure_ascii=False, indent=2) + "\n"
    elif args.format == "csv":
        buf = io.StringIO()
        data = to_rows(rows)
        writer = csv.DictWriter(buf, fieldnames=list(data[0]) if data else ["day"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
        out = buf.getvalue()
    else:
        out = to_text(rows)
    if args.out:
        Path(args.out).write_text(out, encoding="utf-8")
    else:
        sys.stdout.write(out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = with_defaults(_parser()).parse_args(argv)
    try:
        book, ledger = None, args.ledger
        if args.config:
            pricing, cfg_ledger = _load_config(args.config)
            book = PriceBook(pricing, base_dir=str(Path(args.config).resolve().parent))  # its catalogue files
            ledger = ledger or cfg_ledger
        ledger = ledger or "llmroute-ledger.db"
        is_url = ledger.startswith(("postgresql://", "postgres://"))
        if not is_url and not Path(ledger).exists():
            print(f"llmroute report: no ledger at {ledger}", file=sys.stderr)
            return 2
        from llmroute.cli.paths import check_ledger_input, check_output  # loaded when the command runs, not at import

        if not is_url:
            check_ledger_input(ledger, "--ledger")  # every path is checked before the report is built
        if args.reconcile:
            return _reconcile_main(args, ledger)
        check_output(args.out or ("llmroute-report.html" if args.format == "html" else None), "--out")
        by_keys = _check_by(args.by.split(","))
        now = time.time()
        rows = report(ledger, by=by_keys, since=args.since, until=args.until, reprice=args.reprice,
                      price_book=book, now=now, include_probes=args.include_probes,
                      include_shadow=args.include_shadow)  # fmt: skip
        lengths = None
        if args.by_length and args.format in ("table", "json"):
            t_since, t_until = parse_time(args.since, now=now), parse_time(args.until, now=now, what="--until")
            lengths = latency_by_length(read_records(ledger, since=t_since, until=t_until))
        if args.format == "json":
            text = to_json(rows) + "\n"
            if lengths is not None:
                doc = json.loads(text)
                doc["by_length"] = lengths
                text = json.dumps(doc, ensure_ascii=False, indent=2) + "\n"
        elif args.format == "csv":
            text = to_csv(rows, by_keys)
        elif args.format == "table":
            from llmroute.accounting.batch_savings import savings_text  # loaded when the command runs, not at import

            text = to_table(rows, by_keys, wide=args.wide) + savings_text(read_records(
                ledger, since=parse_time(args.since, now=now), until=parse_time(args.until, now=now, what="--until")))
            if lengths is not None:
                text += "\n" + to_length_table(lengths)
        else:
            t_since, t_until = parse_time(args.since, now=now), parse_time(args.until, now=now, what="--until")
            title = f"llmroute cost report: {'PostgreSQL ledger' if is_url else Path(ledger).name}" + (
                f", since {args.since}" if args.since else "")
            records = (r for r in read_records(ledger, since=t_since, until=t_until)
                       if _counted(r, args.include_probes, args.include_shadow))
            text = to_html(rows, by_keys, records, title=title,
                           rates=(book.rates() if book else None))  # fmt: skip
            out = Path(args.out or "llmroute-report.html")
            out.write_text(text, encoding="utf-8")
            print(f"wrote {out} ({len(rows)} groups)")
            return 0
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        return 0
    except (ValueError, LLMRouteError, FileNotFoundError) as e:
        print(f"llmroute report: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
