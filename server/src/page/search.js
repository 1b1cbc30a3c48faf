// reel serve's chat page: the search box. Loaded after page.js, whose helpers it uses ($, api,
// errorOf, notify, openSession); every piece of a session's text goes in as text.

async function search(event) {
  event.preventDefault();
  const words = $("search").value.trim();
  const results = $("search-results");
  results.replaceChildren();
  results.hidden = !words;
  if (!words) return;
  const response = await api("/v1/search?limit=20&q=" + encodeURIComponent(words));
  if (!response.ok) return notify(await errorOf(response));
  const page = await response.json();
  if (page.hits.length === 0) {
    const none = document.createElement("li");
    none.textContent = "Nothing found";
    results.append(none);
  }
  for (const hit of page.hits) results.append(searchResult(hit));
}

// A hit: its session, who said it and when, and the snippet with the match marked. Every piece
// of text goes in as text, never as markup.
function searchResult(hit) {
  const item = document.createElement("li");
  const button = document.createElement("button");
  button.type = "button";
  button.dataset.session = hit.session_id;
  button.dataset.ordinal = String(hit.ordinal);
  const snippet = document.createElement("span");
  snippet.className = "snippet";
  for (const part of hit.snippet) {
    const piece = document.createElement(part.matched ? "mark" : "span");
    piece.textContent = part.text;
    snippet.append(piece);
  }
  const meta = document.createElement("span");
  meta.className = "meta";
  const who = hit.tool_name ? `${hit.role} (${hit.tool_name})` : hit.role;
  meta.textContent = `${hit.session_id} · ${who} · ${new Date(hit.at_ms).toLocaleString()}`;
  button.append(snippet, meta);
  button.addEventListener("click", () => openSession(hit.session_id, hit.ordinal));
  item.append(button);
  return item;
}

$("search-form").addEventListener("submit", search);
