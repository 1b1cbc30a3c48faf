"""Searches every session from reel serve's chat page: the search box (keyboard only) lists
the hits newest first with the match marked, markup in a session's words shows as text, and a
hit opens its session at that point (its entry shown, marked and focused).

Run by tests/tests/search.rs with the Playwright from tools/playwright/requirements.txt and
Debian's chromium. The test stored session "paris" (the weather example: "It is sunny in
Paris") and session "hostile", whose prompt holds an <img onerror> tag and the word "sunny".

    python search_box.py SERVER_PORT CHROMIUM

Prints one JSON line of what it saw; exits non-zero on the first failed check.
"""

import asyncio
import json
import sys

from playwright.async_api import async_playwright, expect

TIMEOUT_MS = 30_000


async def main():
    server_port, chromium = sys.argv[1:3]
    base = f"http://127.0.0.1:{server_port}"
    seen = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        page = await browser.new_page(viewport={"width": 1200, "height": 900})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        await page.goto(f"{base}/")
        await expect(page.locator("#sessions button")).to_have_count(2)

        # Keyboard only: the box, the words, Enter.
        await page.locator("#search").focus()
        await page.keyboard.type("sunny")
        await page.keyboard.press("Enter")
        results = page.locator("#search-results button")
        await expect(results.first).to_be_visible()
        count = await results.count()
        seen["hits"] = count
        assert count >= 3, f"{count} hits"
        marks = await page.locator("#search-results mark").all_inner_texts()
        assert marks and all(mark.lower() == "sunny" for mark in marks), marks
        # The hostile prompt's tag is text, not an element; no script ran.
        assert await page.locator("#search-results img").count() == 0
        hostile = page.locator('#search-results button[data-session="hostile"]').first
        await expect(hostile).to_contain_text("<img src=x onerror=")
        assert await page.title() != "pwned"

        # The weather session's assistant reply: Enter on it opens the session there.
        reply = page.locator(
            '#search-results button[data-session="paris"]', has_text="It is"
        ).first
        ordinal = await reply.get_attribute("data-ordinal")
        await reply.focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#session-title")).to_have_text("paris")
        found = page.locator("#timeline li.found")
        await expect(found).to_have_count(1)
        await expect(found).to_contain_text("It is sunny in Paris")
        assert await found.get_attribute("data-ordinal") == ordinal
        assert await page.evaluate("document.activeElement.classList.contains('found')")
        seen["opened"] = ordinal

        # Words nobody said.
        await page.locator("#search").fill("nowhere")
        await page.keyboard.press("Enter")
        await expect(page.locator("#search-results li")).to_have_text(["Nothing found"])
        if errors:
            raise AssertionError(f"the page logged errors: {errors}")
        await browser.close()
    print(json.dumps(seen))


asyncio.run(main())
