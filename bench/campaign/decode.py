"""A line that is not UTF-8, under each ``on_decode_error`` (``--only decode``)."""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

from bench.campaign.arrivals import Arrivals
from bench.campaign.outcome import Outcome, tally
from bench.campaign.processes import last_error
from bench.campaign.workspace import Workspace

__all__ = ["undecodable"]


def undecodable(work: Path, args: argparse.Namespace) -> list[Outcome]:
    """A file with a line that is not UTF-8: fail names the file and offset; replace and skip
    carry on."""
    rows = []
    for mode in ("fail", "replace", "skip"):
        rng = random.Random(args.seed + 30)
        ws = Workspace(work / f"decode-{mode}", on_decode_error=mode, max_resets=2)
        arrivals = Arrivals(ws.landing, rng)
        arrivals.place(50)
        bad_name = "in-bad.txt"
        good_before = [f"{bad_name}:{i:05d}:ok" for i in range(3)]
        good_after = [f"{bad_name}:{i:05d}:ok" for i in range(4, 8)]
        head = ("\n".join(good_before) + "\n").encode()
        bad_line = b"in-bad.txt:00003:\xff\xfe not utf-8"
        (ws.landing / bad_name).write_bytes(
            head + bad_line + b"\n" + "\n".join(good_after).encode() + b"\n"
        )
        os.utime(ws.landing / bad_name, ns=(arrivals.newest_ns, arrivals.newest_ns))
        expected = arrivals.expected | set(good_before) | set(good_after)
        code, text = ws.run(timeout=args.timeout)
        got = ws.output()
        message = last_error(text)
        if mode == "fail":
            named = bad_name in message and f"byte offset {len(head)}" in message
            published = sum(got.values())
            result = tally(expected, got, allowed_missing=expected)  # nothing must be invented
            ok = code == 1 and named and result.duplicated == 0 and result.corrupt == 0
            outcome = f"exit {code}, names file and offset: {'yes' if named else 'NO'}"
            # Then the user fixes the file and runs again: everything arrives once.
            (ws.landing / bad_name).write_bytes(
                head + b"in-bad.txt:00003:fixed\n" + "\n".join(good_after).encode() + b"\n"
            )
            os.utime(ws.landing / bad_name, ns=(arrivals.newest_ns, arrivals.newest_ns))
            code2, _ = ws.run(timeout=args.timeout)
            fixed = tally(expected | {"in-bad.txt:00003:fixed"}, ws.output())
            ok = ok and code2 == 0 and fixed.exactly_once()
            outcome += f"; fixed file, next run exit {code2}"
            rows.append(
                Outcome(
                    fault="undecodable bytes (on_decode_error=fail)",
                    engine="local",
                    delivery="exactly_once",
                    expected="clear error naming file and offset, exit 1",
                    outcome=outcome,
                    lost=fixed.lost,
                    duplicated=fixed.duplicated,
                    corrupt=fixed.corrupt,
                    ok=ok,
                    message=message,
                    details={"published_before_fix": published},
                )
            )
            continue
        replaced = "in-bad.txt:00003:\ufffd\ufffd not utf-8"
        if mode == "replace":
            result = tally(expected | {replaced}, got)
            ok = code == 0 and result.exactly_once()
            outcome = f"exit {code}, the bad line written with U+FFFD"
            message = ""
        else:
            result = tally(expected, got)
            warned = any(
                "skipped the line at byte offset" in ln and bad_name in ln
                for ln in text.splitlines()
            )
            ok = code == 0 and result.exactly_once() and warned
            outcome = (
                f"exit {code}, the bad line dropped with a warning: {'yes' if warned else 'NO'}"
            )
            message = next((ln for ln in text.splitlines() if "skipped the line" in ln), "")
            message = message.split("WARNING", 1)[-1].strip()
        rows.append(
            Outcome(
                fault=f"undecodable bytes (on_decode_error={mode})",
                engine="local",
                delivery="exactly_once",
                expected="carries on",
                outcome=outcome,
                lost=result.lost,
                duplicated=result.duplicated,
                corrupt=result.corrupt,
                ok=ok,
                message=message,
            )
        )
    return rows
