"""Drives a decision on a call of an `approval: ask` tool in reel serve's chat page, keyboard
only: the inbox filter ("Only those waiting for a decision") lists the waiting session alone,
Enter opens it, the card of the waiting call shows the three decisions, Tab reaches "Allow
once", Enter decides, the tool runs, and a reload still shows the decision.

Run by tests/tests/approvals.rs with the Playwright from tools/playwright/requirements.txt and
Debian's chromium. The test made session SESSION, submitted a prompt whose run waits, and made
one more session that waits for nothing.

    python approval_card.py SERVER_PORT CHROMIUM SESSION

Prints one JSON line of what it saw; exits non-zero on the first failed check.
"""

import asyncio
import json
import sys

from playwright.async_api import async_playwright, expect

TIMEOUT_MS = 30_000


async def tab_to(page, focused, what):
    """Presses Tab until the expression `focused` holds."""
    for _ in range(40):
        await page.keyboard.press("Tab")
        if await page.evaluate(focused):
            return
    raise AssertionError(f"Tab never reached {what}")


async def main():
    server_port, chromium, session = sys.argv[1:4]
    base = f"http://127.0.0.1:{server_port}"
    seen = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(TIMEOUT_MS)
        await page.goto(f"{base}/")

        # The inbox: the filter, reached and ticked by keyboard, leaves the waiting session.
        entries = page.locator("#sessions button")
        await expect(entries).to_have_count(2)
        await tab_to(page, "document.activeElement.id === 'waiting-only'", "the filter")
        await page.keyboard.press("Space")
        await expect(entries).to_have_count(1)
        await expect(entries.first).to_contain_text("waits for a decision on send")
        seen["inbox"] = await entries.first.get_attribute("data-session")
        await tab_to(page, f"document.activeElement.dataset.session === '{session}'", "the session")
        await page.keyboard.press("Enter")

        # The waiting call, from the session's snapshot: its card asks.
        card = page.locator("#timeline li.tool")
        await expect(card.locator("summary")).to_contain_text("awaiting_approval")
        buttons = card.locator(".decision button")
        await expect(buttons).to_have_text(["Allow once", "Allow always", "Reject"])

        # Keyboard only: Tab until "Allow once" has the focus, Enter.
        await tab_to(page, "document.activeElement.dataset.decision === 'allow_once'", "Allow once")
        await page.keyboard.press("Enter")
        await expect(card.locator(".decided")).to_have_text("Decision: allowed")
        await expect(card.locator("pre.result")).to_contain_text("sent")
        await expect(card.locator("summary")).to_contain_text("completed")
        await expect(card.locator(".decision button")).to_have_count(0)
        seen["live"] = await card.locator("summary").inner_text()

        # A reload shows the decision, and no buttons.
        await page.reload()
        await expect(card.locator(".decided")).to_have_text("Decision: allowed")
        await expect(card.locator(".decision button")).to_have_count(0)
        await expect(card.locator("summary")).to_contain_text("completed")
        seen["reloaded"] = await card.locator(".decided").inner_text()
        if errors:
            raise AssertionError(f"the page logged errors: {errors}")
        await browser.close()
    print(json.dumps(seen))


asyncio.run(main())
