"""Reads a session's events from a JetStream stream with the official Python client (PyPI
`nats-py`), a second client library beside the Rust one reel publishes with.

Usage: jetstream_reader.py SERVER STREAM SUBJECT. Prints one JSON line per message of SUBJECT,
in stream order: its Nats-Msg-Id and Reel-Ordinal headers and its payload's backendEvent
ordinal and name.
"""

import asyncio
import json
import sys

import nats


async def main(server, stream, subject):
    client = await nats.connect(f"nats://{server}")
    jetstream = client.jetstream()
    info = await jetstream.stream_info(stream)
    subscription = await jetstream.subscribe(subject, stream=stream, ordered_consumer=True)
    for _ in range(info.state.messages):
        try:
            message = await subscription.next_msg(timeout=1)
        except nats.errors.TimeoutError:
            break
        frame = json.loads(message.data)["backendEvent"]
        print(
            json.dumps(
                {
                    "msg_id": message.headers.get("Nats-Msg-Id"),
                    "ordinal_header": message.headers.get("Reel-Ordinal"),
                    "ordinal": frame["ordinal"],
                    "name": frame["name"],
                }
            ),
            flush=True,
        )
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
