// A Durable Streams reader on the protocol's official TypeScript client
// (@durable-streams/client), reading a `reel serve` session's stream as any application would.
// The end-to-end tests run it against a real server (and through a caching proxy).
//
// Usage: node durable_streams_client.mjs OPTIONS_JSON
//
// OPTIONS_JSON: {"url": "...", "token"?: "...", "offset"?: "...", "live": "catch-up" | "long-poll" | "sse",
//                "until"?: {"name": "ChatRunFinished", "count": 1}}
//   catch-up: reads until the first response that is up to date, then ends. (The client's own
//     `live: false` reads one response only, however many chunks the stream has; its live modes
//     read plain catch-up requests until up to date, so catch-up is a live read stopped there.)
//   a live mode: reads on until `until` (a count of ui events of that name) has been seen.
//
// Prints one JSON line per batch as it comes: {"offset", "upToDate", "items": [...frames]},
// then {"end": true, "offset"} (the line-by-line output lets a test stop it, and the server,
// mid-stream and keep the last offset it printed).

import { stream } from "@durable-streams/client";

const options = JSON.parse(process.argv[2]);
const headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
const until = options.until;
let seen = 0;

const catchUp = options.live === "catch-up";
const res = await stream({
  url: options.url,
  headers,
  offset: options.offset,
  live: catchUp ? "long-poll" : options.live,
  json: true,
});

await new Promise((resolve, reject) => {
  const stop = res.subscribeJson(async (batch) => {
    process.stdout.write(
      JSON.stringify({ offset: batch.offset, upToDate: batch.upToDate, items: batch.items }) + "\n",
    );
    if (until) {
      seen += batch.items.filter((f) => f.uiEvent && f.uiEvent.name === until.name).length;
      if (seen >= until.count) {
        stop();
        resolve();
      }
    } else if (catchUp && batch.upToDate) {
      stop();
      resolve();
    }
  });
  // The stream ends only when told to (above) or on an error.
  res.closed.catch(reject);
});
// Exits once stdout has taken everything (a pipe is written asynchronously).
process.stdout.write(JSON.stringify({ end: true, offset: res.offset }) + "\n", () => process.exit(0));
