// An ACP client on the official TypeScript SDK (@agentclientprotocol/sdk), driving an agent
// over stdio as an editor would. The end-to-end tests run it against `reel acp`.
//
// Usage: node acp_client.mjs STEPS_JSON AGENT_PROGRAM [AGENT_ARGS...]
//
// STEPS_JSON is a JSON list run in order against one connection:
//   {"do": "new", "cwd": "/abs"}               session/new (the session it makes is the current one)
//   {"do": "load", "sessionId": "...", "cwd": "/abs"}   session/load
//   {"do": "prompt", "text": "..."}           session/prompt on the current session
//   {"do": "prompt_and_cancel", "text": "...", "afterChunks": N}
//                                              session/prompt, and session/cancel once N agent
//                                              message chunks have come
//   {"do": "wait_chunks", "count": N}          waits until N agent message chunks have come in
//                                              all (a run the agent goes on with by itself)
//   {"do": "list"}                             session/list
//   {"do": "resume", "sessionId": "...", "cwd": "/abs"} session/resume (no replay)
//   {"do": "fork", "cwd": "/abs"}             session/fork of the current session; the fork
//                                              becomes the current one
//   {"do": "close"}                            session/close of the current session
//   {"do": "raw", "method": "...", "params": {...}}     any request, its error kept
// Permission requests are answered with the option whose kind is `permission` (a client
// setting: "allow_once", "allow_always", "reject_once"; "cancelled" cancels).
//
// Prints one JSON document on stdout: each step's result (or error), every session/update
// notification in order, every permission request with the answer given.

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const [stepsJson, program, ...agentArgs] = process.argv.slice(2);
const { steps, permission = "allow_once" } = JSON.parse(stepsJson);

const child = spawn(program, agentArgs, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));

const updates = [];
const permissions = [];
let chunkWaiters = [];

const app = acp
  .client({ name: "reel-test-client" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params);
    if (params.update.sessionUpdate === "agent_message_chunk") {
      const chunks = updates.filter((u) => u.update.sessionUpdate === "agent_message_chunk").length;
      chunkWaiters = chunkWaiters.filter(([n, resolve]) => (chunks >= n ? (resolve(), false) : true));
    }
  })
  .onRequest("session/request_permission", ({ params }) => {
    let outcome;
    if (permission === "cancelled") {
      outcome = { outcome: "cancelled" };
    } else {
      const option = params.options.find((o) => o.kind === permission);
      outcome = { outcome: "selected", optionId: option.optionId };
    }
    permissions.push({ request: params, answer: outcome });
    return { outcome };
  });

const chunksReached = (n) => new Promise((resolve) => chunkWaiters.push([n, resolve]));

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const results = [];
await app.connectWith(stream, async (ctx) => {
  const init = await ctx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  results.push({ step: "initialize", result: init });
  let sessionId = null;
  for (const step of steps) {
    try {
      let result;
      switch (step.do) {
        case "new":
          result = await ctx.request("session/new", { cwd: step.cwd, mcpServers: step.mcpServers ?? [] });
          sessionId = result.sessionId;
          break;
        case "load":
          sessionId = step.sessionId;
          result = await ctx.request("session/load", { sessionId, cwd: step.cwd, mcpServers: [] });
          break;
        case "prompt":
          result = await ctx.request("session/prompt", {
            sessionId,
            prompt: step.prompt ?? [{ type: "text", text: step.text }],
          });
          break;
        case "prompt_and_cancel": {
          const already = updates.filter((u) => u.update.sessionUpdate === "agent_message_chunk").length;
          const answer = ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: step.text }] });
          await chunksReached(already + step.afterChunks);
          await ctx.notify("session/cancel", { sessionId });
          result = await answer;
          break;
        }
        case "wait_chunks": {
          const now = updates.filter((u) => u.update.sessionUpdate === "agent_message_chunk").length;
          if (now < step.count) await chunksReached(step.count);
          break;
        }
        case "list":
          result = await ctx.request("session/list", {});
          break;
        case "resume":
          sessionId = step.sessionId;
          result = await ctx.request("session/resume", { sessionId, cwd: step.cwd, mcpServers: [] });
          break;
        case "fork":
          result = await ctx.request("session/fork", { sessionId, cwd: step.cwd, mcpServers: [] });
          sessionId = result.sessionId;
          break;
        case "close":
          result = await ctx.request("session/close", { sessionId });
          break;
        case "raw":
          result = await ctx.request(step.method, step.params);
          break;
        default:
          throw new Error(`unknown step ${step.do}`);
      }
      results.push({ step: step.do, sessionId, result: result ?? null });
    } catch (error) {
      results.push({ step: step.do, sessionId, error: { code: error.code, message: error.message, data: error.data } });
    }
  }
});
child.stdin.end();
const exit = await exited;
process.stdout.write(JSON.stringify({ results, updates, permissions, exit }) + "\n");
