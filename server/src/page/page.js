// reel serve's chat page: a sessions list, a streaming timeline, submit and cancel, and the
// decisions on calls of `approval: ask` tools.
//
// It speaks only the server's public API: the session routes for the list and the requests,
// and each session's Server-Sent Events stream for the timeline. The stream is read with
// fetch() rather than EventSource so that it can carry a bearer token; after a drop it comes
// back with the last event id it saw (`Last-Event-ID`), and the server sends exactly the frames
// after it. Text patches are applied at their `offset`, so a frame seen twice could not double
// any text either.
"use strict";

const $ = (id) => document.getElementById(id);
const timeline = $("timeline");

const state = {
  token: sessionStorage.getItem("reel-token"),
  session: null, // the id of the session on screen
  generation: 0, // bumped whenever another session is opened: older streams stop
  abort: null, // ends the open event stream
  lastEventId: null, // the SSE id of the last frame with one: where a reconnect resumes
  items: new Map(), // timeline entries by message id
  running: false,
  nextPage: null,
  spot: null, // the ordinal a search hit opens the session at, until its entry is shown
};

// ---- the API ---------------------------------------------------------------------------------

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers);
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    await askForToken();
    return api(path, options);
  }
  return response;
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return `${body.error.code}: ${body.error.message}`;
  } catch (_) {
    return `HTTP ${response.status}`;
  }
}

function askForToken() {
  const dialog = $("token-dialog");
  return new Promise((resolve) => {
    $("token-form").addEventListener(
      "submit",
      () => {
        state.token = $("token").value;
        sessionStorage.setItem("reel-token", state.token);
        resolve();
      },
      { once: true },
    );
    if (!dialog.open) dialog.showModal();
  });
}

const sessionPath = (id, rest) => `/v1/sessions/${encodeURIComponent(id)}${rest}`;

// ---- the sessions list -----------------------------------------------------------------------

async function loadSessions(more) {
  // The inbox: only the sessions whose run waits for a person's decision.
  let url = "/v1/sessions?limit=50" + ($("waiting-only").checked ? "&waiting=true" : "");
  if (more && state.nextPage) url += "&after=" + encodeURIComponent(state.nextPage);
  const response = await api(url);
  if (!response.ok) return notify(await errorOf(response));
  const page = await response.json();
  if (!more) $("sessions").replaceChildren();
  for (const summary of page.sessions) $("sessions").append(sessionEntry(summary));
  state.nextPage = page.next;
  $("more-sessions").hidden = !page.next;
}

function sessionEntry(summary) {
  const item = document.createElement("li");
  const button = document.createElement("button");
  button.type = "button";
  button.dataset.session = summary.session_id;
  button.textContent = summary.title || summary.session_id;
  const meta = document.createElement("span");
  meta.className = "meta";
  const when = new Date(summary.updated_at_ms).toLocaleString();
  meta.textContent = summary.pending
    ? `waits for a decision on ${summary.pending.map((call) => call.tool_name).join(", ")} · ${when}`
    : `${summary.runs} runs · ${summary.last_run_status || "new"} · ${when}`;
  button.append(meta);
  button.setAttribute("aria-current", String(summary.session_id === state.session));
  button.addEventListener("click", () => openSession(summary.session_id));
  item.append(button);
  return item;
}

async function newSession() {
  const response = await api("/v1/sessions", { method: "POST", body: "{}" });
  if (!response.ok) return notify(await errorOf(response));
  const summary = await response.json();
  await loadSessions(false);
  openSession(summary.session_id);
  $("prompt").focus();
}

// ---- one session -----------------------------------------------------------------------------

// Opens session `id`; with `ordinal`, the entity that event made is shown and focused once it
// arrives (a search hit's spot).
function openSession(id, ordinal) {
  state.spot = ordinal ?? null;
  if (state.abort) state.abort.abort();
  state.generation += 1;
  state.session = id;
  state.lastEventId = null;
  state.items.clear();
  timeline.replaceChildren();
  setRunning(false);
  notify(null);
  $("session-title").textContent = id;
  $("composer").hidden = false;
  if (location.hash !== "#session=" + encodeURIComponent(id)) {
    history.replaceState(null, "", "#session=" + encodeURIComponent(id));
  }
  for (const button of document.querySelectorAll("#sessions button")) {
    button.setAttribute("aria-current", String(button.dataset.session === id));
  }
  follow(id, state.generation);
}

async function follow(id, generation) {
  let delay = 250;
  while (state.generation === generation) {
    const abort = new AbortController();
    state.abort = abort;
    try {
      const headers = { Accept: "text/event-stream" };
      if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
      const response = await api(sessionPath(id, "/events"), { headers, signal: abort.signal });
      if (!response.ok) {
        notify(await errorOf(response));
        if (response.status === 404) return;
      } else {
        setConnection("live");
        delay = 250;
        await readEvents(response.body, (frame) => {
          if (state.generation === generation) handleFrame(frame);
        }, (id) => {
          if (state.generation === generation) state.lastEventId = id;
        });
      }
    } catch (error) {
      if (abort.signal.aborted) return;
    }
    if (state.generation !== generation) return;
    setConnection("reconnecting…");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

// Reads a Server-Sent Events body: each event's data is one frame; its id, when it has one, is
// remembered once the frame is handled (so a drop in between resends that frame).
async function readEvents(body, onFrame, onId) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  let id = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length) onFrame(JSON.parse(data.join("\n")));
        if (id !== null) onId(id);
        data = [];
        id = null;
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      } else if (line.startsWith("id:")) {
        id = line.slice(3).replace(/^ /, "");
      }
    }
  }
}

function handleFrame(frame) {
  if (frame.snapshot) {
    for (const entity of frame.snapshot.entities || []) applyEntity(entity);
    if (state.spot !== null) showSpot();
  } else if (frame.uiEvent) {
    applyUiEvent(frame.uiEvent.name, frame.uiEvent.payload || {}, Number(frame.uiEvent.ordinal));
  } else if (frame.error) {
    notify(`${frame.error.code}: ${frame.error.message}`);
    if (frame.error.code === "cursor_out_of_range") {
      // The session is not the one this page saw (it was replaced): start over from its start.
      state.lastEventId = null;
      state.items.clear();
      timeline.replaceChildren();
    }
  } else if (frame.done && frame.done.status === "shutdown") {
    setConnection("session stopped");
  }
}

// ---- the timeline ----------------------------------------------------------------------------

// Shows the entry a search hit names (the last one made at or before its ordinal: a tool's
// result is in its call's card), marked and focused, once.
function showSpot() {
  let found = null;
  for (const node of timeline.children) {
    if (Number(node.dataset.ordinal) <= state.spot) found = node;
  }
  state.spot = null;
  if (!found) return;
  found.classList.add("found");
  found.tabIndex = -1;
  found.scrollIntoView({ block: "center" });
  found.focus();
}

function applyEntity(entity) {
  const payload = entity.payload || {};
  const ordinal = Number(entity.createdOrdinal);
  if (entity.tombstone) {
    const item = state.items.get(entity.id);
    if (item) item.element.remove();
    state.items.delete(entity.id);
  } else if (entity.kind === "ChatMessage") {
    const item = message(payload.messageId || entity.id, payload.role, ordinal);
    setText(item, payload.text || payload.content || payload.prompt || payload.error || "");
    setStatus(item, payload.status);
  } else if (entity.kind === "ChatToolCall") {
    const item = toolCall(payload.messageId || entity.id, payload, ordinal);
    if (payload.input) setText(item, payload.input);
    setStatus(item, payload.error ? `${payload.status} · ${payload.error}` : payload.status);
    if (payload.status === "awaiting_approval") askDecision(item);
    if (payload.approval) showDecision(item, payload.approval);
  } else if (entity.kind === "ChatToolResult") {
    const item = toolCallOf(payload.toolCallId, ordinal);
    if (item) setResult(item, payload.result, payload.status);
  } else if (entity.kind === "ChatRedaction") {
    // `reel redact` erased content: its places read "[redacted]"; this says why.
    const item = message(entity.id, "redaction", ordinal);
    setText(item, payload.reason ? `content redacted: ${payload.reason}` : "content redacted");
  }
}

function applyUiEvent(name, payload, ordinal) {
  switch (name) {
    case "ChatUserMessageAccepted":
      setText(message(payload.messageId, "user", ordinal), payload.text || payload.prompt || "");
      break;
    case "ChatTextSegmentStarted":
    case "ChatReasoningSegmentStarted":
      setStatus(message(payload.messageId, payload.role, ordinal), payload.status);
      break;
    case "ChatTextPatch":
    case "ChatReasoningPatch":
      patch(message(payload.messageId, payload.role, ordinal), payload, payload.text);
      break;
    case "ChatTextSegmentFinished":
    case "ChatReasoningSegmentFinished": {
      const item = message(payload.messageId, payload.role, ordinal);
      setText(item, payload.text || "");
      setStatus(item, payload.status);
      break;
    }
    case "ChatToolCallStarted":
    case "ChatToolCallRequested":
    case "ChatToolExecutionStarted":
    case "ChatToolCallFinished": {
      const item = toolCall(payload.messageId, payload, ordinal);
      if (payload.input) setText(item, payload.input);
      setStatus(item, payload.status);
      break;
    }
    case "ChatToolApprovalRequested": {
      const item = toolCallOf(payload.toolCallId, ordinal);
      if (item) {
        setStatus(item, "awaiting_approval");
        askDecision(item);
      }
      break;
    }
    case "ChatToolApprovalDecided": {
      const item = toolCallOf(payload.toolCallId, ordinal);
      if (item) showDecision(item, payload.decision, payload.always);
      break;
    }
    case "ChatToolArgumentsPatch":
      patch(toolCall(payload.messageId, payload, ordinal), payload, payload.arguments);
      break;
    case "ChatToolResultReady": {
      const item = toolCallOf(payload.toolCallId, ordinal);
      if (item) setResult(item, payload.result, payload.status);
      break;
    }
    case "ChatRunStarted":
      setRunning(true);
      break;
    case "ChatRunFinished":
      setRunning(false);
      break;
    case "ChatRunStopped":
    case "ChatRunFailed":
      setRunning(false);
      notify(`run ${payload.status || name}${payload.error ? ": " + payload.error : ""}`);
      break;
  }
}

// The entry of message `id`, made (in ordinal order) the first time it is named.
function message(id, role, ordinal) {
  let item = state.items.get(id);
  if (item) return item;
  const element = document.createElement("li");
  let body;
  if (role === "thinking") {
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "Reasoning";
    body = document.createElement("pre");
    details.append(summary, body);
    element.append(details);
    item = { element, body, summary, label: "Reasoning" };
  } else {
    body = document.createElement("div");
    body.className = `message ${role || "assistant"}`;
    const label = document.createElement("span");
    label.className = "role";
    label.textContent = role || "assistant";
    const text = document.createElement("span");
    text.className = "text";
    body.append(label, text);
    element.append(body);
    item = { element, body: text, summary: label, label: role || "assistant" };
  }
  item.text = "";
  item.chars = 0;
  place(element, ordinal);
  state.items.set(id, item);
  return item;
}

// The card of tool call `id` (reel's id of the call), made the first time it is named.
function toolCall(id, payload, ordinal) {
  let item = state.items.get(id);
  if (item) return item;
  const element = document.createElement("li");
  element.className = "tool";
  const details = document.createElement("details");
  const summary = document.createElement("summary");
  const body = document.createElement("pre");
  body.className = "arguments";
  const result = document.createElement("pre");
  result.className = "result";
  details.append(summary, body, result);
  element.append(details);
  const label = `Tool ${payload.toolName || ""}`.trim();
  summary.textContent = label;
  item = { element, body, summary, label, result, text: "", chars: 0, toolCallId: payload.toolCallId, ordinal };
  place(element, ordinal);
  state.items.set(id, item);
  return item;
}

// The latest tool call the provider named `toolCallId` (providers reuse their ids across runs).
function toolCallOf(toolCallId, ordinal) {
  let found = null;
  for (const item of state.items.values()) {
    if (item.toolCallId === toolCallId && item.ordinal <= ordinal) {
      if (!found || item.ordinal > found.ordinal) found = item;
    }
  }
  return found;
}

function place(element, ordinal) {
  element.dataset.ordinal = String(ordinal);
  let before = null;
  for (let node = timeline.lastElementChild; node; node = node.previousElementSibling) {
    if (Number(node.dataset.ordinal) <= ordinal) break;
    before = node;
  }
  const following = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
  timeline.insertBefore(element, before);
  if (following && state.spot === null) timeline.scrollTop = timeline.scrollHeight;
}

function setText(item, text) {
  item.text = text;
  item.chars = Array.from(text).length;
  item.body.textContent = text;
}

// A patch replaces what the entry holds from its offset (in Unicode scalar values) on.
function patch(item, payload, text) {
  text = text || "";
  const offset = Number(payload.offset || 0);
  const mode = payload.mode || "";
  if (mode.endsWith("_SNAPSHOT") || mode.endsWith("_REPLACE")) {
    setText(item, text);
  } else if (offset === item.chars) {
    item.text += text;
    item.chars += Array.from(text).length;
    item.body.textContent = item.text;
  } else if (offset < item.chars) {
    setText(item, Array.from(item.text).slice(0, offset).join("") + text);
  } else {
    setText(item, item.text + text); // a gap: the segment's end brings the whole text
  }
  setStatus(item, payload.status);
}

function setStatus(item, status) {
  if (!status || item.label === "user") return; // a prompt's own status says nothing new
  item.summary.textContent = `${item.label} · ${status}`;
}

// The three decisions on a waiting call, as buttons (reachable by Tab, pressed with Enter).
function askDecision(item) {
  if (item.decision) return;
  const bar = document.createElement("div");
  bar.className = "decision";
  bar.setAttribute("role", "group");
  bar.setAttribute("aria-label", `Run ${item.label}?`);
  for (const [decision, text] of [
    ["allow_once", "Allow once"],
    ["allow_always", "Allow always"],
    ["reject_once", "Reject"],
  ]) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = text;
    button.dataset.decision = decision;
    button.addEventListener("click", () => decide(item, decision, bar));
    bar.append(button);
  }
  item.decision = bar;
  item.element.append(bar);
  item.element.querySelector("details").open = true;
}

async function decide(item, decision, bar) {
  for (const button of bar.querySelectorAll("button")) button.disabled = true;
  const sent = await request({ approve: { callId: item.toolCallId, decision } });
  if (!sent) for (const button of bar.querySelectorAll("button")) button.disabled = false;
}

// What the person decided, in place of the buttons.
function showDecision(item, decision, always) {
  const text = document.createElement("p");
  text.className = "decided";
  text.textContent = `Decision: ${decision}${always ? " (always for this tool)" : ""}`;
  if (item.decision) item.decision.replaceWith(text);
  else if (!item.element.querySelector(".decided")) item.element.append(text);
  item.decision = text;
}

// The result goes under the call; the card keeps the call's own status (completed, failed),
// which a result's ("ok", "error") would otherwise replace after a reload.
function setResult(item, result, status) {
  item.result.textContent = result || "";
  item.result.dataset.status = status || "";
}

// ---- controls --------------------------------------------------------------------------------

function setRunning(running) {
  state.running = running;
  $("cancel").disabled = !running;
}

function setConnection(text) {
  $("connection").textContent = text;
}

function notify(text) {
  $("notice").hidden = !text;
  $("notice").textContent = text || "";
}

async function request(body) {
  const response = await api(sessionPath(state.session, "/requests"), {
    method: "POST",
    body: JSON.stringify(body),
  });
  if (!response.ok) notify(await errorOf(response));
  return response.ok;
}

async function send(event) {
  event.preventDefault();
  const prompt = $("prompt").value;
  if (!prompt.trim() || !state.session) return;
  notify(null);
  // While a run goes on, a prompt waits for it (a follow-up) instead of being refused.
  const sent = await request(state.running ? { followUp: { prompt } } : { submit: { prompt } });
  if (sent) $("prompt").value = "";
  loadSessions(false);
}

function cancel() {
  if (state.running) request({ cancel: {} });
}

$("composer").addEventListener("submit", send);
$("cancel").addEventListener("click", cancel);
$("new-session").addEventListener("click", newSession);
$("more-sessions").addEventListener("click", () => loadSessions(true));
$("waiting-only").addEventListener("change", () => loadSessions(false));
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  } else if (event.key === "Escape") {
    cancel();
  }
});

loadSessions(false).then(() => {
  const match = location.hash.match(/^#session=(.+)$/);
  if (match) openSession(decodeURIComponent(match[1]));
});
