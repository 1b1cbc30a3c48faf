"""Reads a reel serve session's stream with the Durable Streams protocol's Python client
(durable-streams on PyPI) and prints the frames it read, as JSON.

Usage: durable_streams_client.py URL MODE [OFFSET]
  MODE catch-up: every frame until up to date (read_json; the client's own live=False reads
  one response only, so this reads with its default mode, which stops at up to date).
  MODE long-poll or sse: frames as they come, until a ChatRunFinished frame.
Prints {"frames": [...], "offset": "..."}.
"""

import json
import sys

from durable_streams import stream

url, mode = sys.argv[1:3]
offset = sys.argv[3] if len(sys.argv) > 3 else None

if mode == "catch-up":
    with stream(url, offset=offset, live="auto") as res:
        frames = res.read_json()
        end = res.offset
else:
    frames = []
    with stream(url, offset=offset, live=mode) as res:
        for frame in res.iter_json():
            frames.append(frame)
            if frame.get("uiEvent", {}).get("name") == "ChatRunFinished":
                break
        end = res.offset

print(json.dumps({"frames": frames, "offset": end}))
