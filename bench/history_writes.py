"""What a write costs as one user's history grows: ms a message, call after call.

    python bench/history_writes.py [--calls 40] [--per-call 1000] [--json out.json]

One user, two threads written in turn, ``--calls`` calls of ``write_messages`` with
``--per-call`` messages each and ``embed=False`` (no model, no vector index work: the
database path, with the keyword windows and their postings that every message gets),
into a fresh schema of an embedded server, one session throughout. Prints the ms a
message of every fifth call, so a cost that grows with the user's history shows as a
rising row. Before migration 018 it did: 0.25 ms a message at the first call and 2.14 at
the fortieth (the insert trigger found its rows through a scan of the user's range of an
index); docs/benchmarks.md, Session 27.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import base_parser, embedded_server, environment, print_table, write_json  # noqa: E402

from memory import HashEmbedder, MemoryManager, Settings  # noqa: E402


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--per-call", type=int, default=1000)
    args = parser.parse_args()
    per_call: list[float] = []
    with embedded_server() as uri:
        settings = Settings.from_env(database_url=uri, schema="history", pool_max_size=1)
        with MemoryManager.open(settings, embedder=HashEmbedder()) as mm:
            for call in range(args.calls):
                msgs = [{"role": "user" if i % 2 == 0 else "assistant",
                         "content": f"turn {call}-{i} about topic {i % 97}, with a few more words {i % 13}"}
                        for i in range(args.per_call)]
                t0 = time.perf_counter()
                mm.write_messages(msgs, user_id="one", thread_id=f"t{call % 2}", embed=False)
                per_call.append(1000 * (time.perf_counter() - t0) / args.per_call)
    shown = sorted(set(range(0, args.calls, 5)) | {args.calls - 1})  # every fifth call, and the last once
    rows = [[call + 1, (call + 1) * args.per_call, f"{per_call[call]:.3f}"] for call in shown]
    print_table(f"write_messages(embed=False) of {args.per_call} messages into one user, call after call",
                ["call", "user's messages after it", "ms a message"], rows)
    print(f"\nload average at end: {environment()['loadavg_at_end']}")
    write_json(args.json, {"per_call": args.per_call, "ms_per_message": per_call})


if __name__ == "__main__":
    main()
