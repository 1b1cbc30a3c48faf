"""A web page of another origin tries to drive a local reel serve, in headless Chromium.

Run by tests/tests/serve_front_door.rs with the Playwright from tools/playwright/requirements.txt
and Debian's chromium. This script serves an "attacker" page on a port of its own; the page,
once loaded, sends what any site a developer visits could send to 127.0.0.1: "simple"
cross-site POSTs (no-cors fetch with text/plain and a form's type, and a real form submission)
that would create a session and run a prompt, and a WebSocket that would read and drive a
session. Prints one JSON line of what the page saw; the test checks that nothing ran.

    python cross_origin.py SERVER_PORT CHROMIUM
"""

import asyncio
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from playwright.async_api import async_playwright

PAGE = """<!doctype html><html><body>
<form id="form" method="POST" enctype="text/plain" target="sink"
      action="http://127.0.0.1:{port}/v1/sessions/victim/requests">
  <input name='{{"submit":{{"prompt":"form","x":"' value='"}}}}'>
</form>
<iframe name="sink"></iframe>
<script>
const reel = "127.0.0.1:{port}";
const seen = {{}};
async function attack() {{
  const posts = [
    ["/v1/sessions", '{{"id":"pwned"}}', "text/plain"],
    ["/v1/sessions", '{{"id":"pwned-form"}}', "application/x-www-form-urlencoded"],
    ["/v1/sessions/victim/requests", '{{"submit":{{"prompt":"pwned"}}}}', "text/plain"],
  ];
  for (const [path, body, type] of posts) {{
    try {{
      const answer = await fetch("http://" + reel + path, {{
        method: "POST", mode: "no-cors", headers: {{"Content-Type": type}}, body,
      }});
      seen[path + " " + type] = answer.type;
    }} catch (error) {{
      seen[path + " " + type] = "error: " + error;
    }}
  }}
  document.getElementById("form").submit();
  seen.websocket = await new Promise((resolve) => {{
    const socket = new WebSocket("ws://" + reel + "/v1/sessions/victim/ws");
    socket.onopen = () => {{
      socket.send('{{"requestId":"pwned","submit":{{"prompt":"pwned over ws"}}}}');
      resolve("open");
    }};
    socket.onerror = () => resolve("error");
  }});
  await new Promise((resolve) => setTimeout(resolve, 1000));
  window.done = seen;
}}
attack();
</script></body></html>"""


def serve_page(server_port):
    page = PAGE.format(port=server_port).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd.server_address[1]


async def main():
    server_port, chromium = sys.argv[1:3]
    page_port = serve_page(server_port)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = await browser.new_page()
        # "localhost" for the attacker's page: another origin (and name) than 127.0.0.1.
        await page.goto(f"http://localhost:{page_port}/")
        await page.wait_for_function("window.done !== undefined", timeout=30_000)
        seen = await page.evaluate("window.done")
        await browser.close()
    print(json.dumps(seen))


asyncio.run(main())
