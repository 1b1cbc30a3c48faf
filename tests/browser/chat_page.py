"""Drives reel serve's chat page in headless Chromium, keyboard only, in a phone-sized window.

Run by tests/tests/serve_page.rs with the Playwright from tools/playwright/requirements.txt and
Debian's chromium (Playwright never downloads a browser here). The page is loaded through a TCP
proxy this script runs, so that the test can cut the page's connections in the middle of a
streaming reply and see the page come back with its last event id.

    python chat_page.py SERVER_PORT CHROMIUM TOKEN SCREENSHOT

The server's command is the one serve_page.rs writes: a first model call that reasons and calls
the get_weather tool, a second that streams REPLY slowly, a third that streams for long (to be
cancelled). Prints one JSON line of what it saw; exits non-zero on the first failed check.
"""

import asyncio
import json
import re
import sys

from playwright.async_api import async_playwright, expect

REPLY = "Oslo: " + "tick " * 60 + "done."
TIMEOUT_MS = 30_000


class Proxy:
    """A TCP proxy to the server that keeps each connection's request head and can cut them all."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.heads = []
        self.writers = []

    async def start(self):
        self.server = await asyncio.start_server(self.connection, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def connection(self, client_reader, client_writer):
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.upstream_port
        )
        self.writers += [client_writer, upstream_writer]
        await asyncio.gather(
            self.pipe(client_reader, upstream_writer, record=True),
            self.pipe(upstream_reader, client_writer, record=False),
            return_exceptions=True,
        )

    async def pipe(self, reader, writer, record):
        try:
            while chunk := await reader.read(65536):
                if record:
                    self.heads.append(chunk.decode("latin-1"))
                writer.write(chunk)
                await writer.drain()
        finally:
            writer.close()

    def cut(self):
        """Drops every open connection, as a network would."""
        for writer in self.writers:
            writer.transport.abort()
        self.writers = []

    def event_stream_requests(self):
        return [h for h in self.heads if re.match(r"GET /v1/sessions/[^/ ]+/events", h)]


def check(condition, message):
    if not condition:
        raise AssertionError(message)


async def press_tab_until(page, selector, limit=10):
    """Moves the focus with Tab alone until `selector` has it."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if await page.evaluate(f"document.activeElement.matches({json.dumps(selector)})"):
            return
    raise AssertionError(f"Tab never reached {selector}")


async def assistant_texts(page):
    return await page.locator("#timeline .message.assistant .text").all_inner_texts()


async def main():
    server_port, chromium, token, screenshot = sys.argv[1:5]
    proxy = Proxy(int(server_port))
    port = await proxy.start()
    base = f"http://127.0.0.1:{port}"
    seen = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        context = await browser.new_context(viewport={"width": 390, "height": 844})
        page = await context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        # A 401 before the token is given and the cut connection are expected failed loads;
        # any other console error is the page's own.
        page.on(
            "console",
            lambda m: m.type == "error"
            and not m.text.startswith("Failed to load resource")
            and errors.append(m.text),
        )
        page.set_default_timeout(TIMEOUT_MS)
        await page.goto(base + "/")

        # The server wants a token: the page asks for it once.
        await expect(page.locator("#token-dialog")).to_be_visible()
        await page.keyboard.type(token)
        await page.keyboard.press("Enter")
        await expect(page.locator("#token-dialog")).to_be_hidden()

        # Keyboard only: Tab to "New session", Enter; the prompt has the focus then.
        await press_tab_until(page, "#new-session")
        await page.keyboard.press("Enter")
        await expect(page.locator("#prompt")).to_be_focused()
        await expect(page.locator("#sessions button")).to_have_count(1)
        session = await page.locator("#sessions button").first.get_attribute("data-session")
        seen["session"] = session

        # A conversation with a tool call and reasoning; the reply streams slowly, and the
        # connection is cut while it does.
        await page.keyboard.type("What is the weather in Oslo?")
        await page.keyboard.press("Enter")
        tool = page.locator("#timeline li.tool summary")
        await expect(tool).to_contain_text("get_weather")
        await expect(tool).to_contain_text("completed")
        await expect(page.locator("#timeline li.tool pre.result")).to_contain_text("snow")
        await expect(page.locator("#timeline li.tool pre.arguments")).to_have_text('{"city":"Oslo"}')
        streaming = page.locator("#timeline .message.assistant .text", has_text="tick")
        await expect(streaming).to_have_count(1)
        streams_before = len(proxy.event_stream_requests())
        proxy.cut()
        seen["cut_at"] = (await assistant_texts(page))[-1]
        await expect(page.locator("#timeline .message.assistant .text").last).to_have_text(REPLY)
        texts = await assistant_texts(page)
        check(texts == ["Let me look.", REPLY], f"the assistant's messages: {texts!r}")
        check(seen["cut_at"] != REPLY, "the cut came after the reply had ended")
        resumed = proxy.event_stream_requests()[streams_before:]
        check(resumed, "the page did not reconnect")
        last_id = re.search(r"(?im)^last-event-id: *([0-9.]+)\r?$", resumed[0])
        check(last_id, f"the reconnect carried no Last-Event-ID: {resumed[0]!r}")
        seen["resumed_from"] = last_id.group(1)

        # Reasoning is collapsed; Enter on its summary opens it.
        reasoning = page.locator("#timeline details").first
        check(await reasoning.get_attribute("open") is None, "reasoning starts open")
        await reasoning.locator("summary").focus()
        await page.keyboard.press("Enter")
        await expect(reasoning.locator("pre")).to_have_text("Checking the forecast.")

        # Cancel: a long reply, Escape in the prompt stops it.
        await page.locator("#prompt").focus()
        await page.keyboard.type("Count for a long time.")
        await page.keyboard.press("Enter")
        await expect(page.locator("#cancel")).to_be_enabled()
        await expect(page.locator("#timeline .message.assistant .text").last).to_contain_text("count")
        await page.keyboard.press("Escape")
        await expect(page.locator("#notice")).to_contain_text("stopped")
        await expect(page.locator("#cancel")).to_be_disabled()
        live = await page.locator("#timeline > li").all_text_contents()

        # A fresh load of the page shows the same timeline, from the session's snapshot.
        await page.reload()
        await expect(page.locator("#timeline .message.user")).to_have_count(2)
        await expect(page.locator("#timeline .message.assistant")).to_have_count(3)
        reloaded = await page.locator("#timeline > li").all_text_contents()
        check(reloaded == live, f"after a reload:\n{reloaded!r}\nlive:\n{live!r}")
        seen["timeline"] = reloaded

        # Nothing is wider than the phone's screen.
        width = await page.evaluate("document.documentElement.scrollWidth")
        check(width <= 390, f"the page is {width}px wide in a 390px window")
        await page.screenshot(path=screenshot, full_page=True)
        check(not errors, f"the page logged errors: {errors}")
        await browser.close()
    print(json.dumps(seen))


asyncio.run(main())
