"""Attachments in the chat (Chromium, real daphne + worker): an image by the Attach button and a
PDF dropped on the composer show as chips, go with the message, show as a thumbnail and a link
in the log (and after a reload), and the demo model answers naming both."""

from __future__ import annotations

import base64

from agents_app.models import Attachment
from tests.attachment_files import pdf, png
from tests.browser.conftest import open_chat, wait_live

DROP = """([name, type, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  const target = document.getElementById('composer');
  for (const kind of ['dragenter', 'dragover', 'drop']) {
    target.dispatchEvent(new DragEvent(kind, { bubbles: true, cancelable: true, dataTransfer: data }));
  }
}"""


PASTE = """([name, type, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  document.getElementById('text').dispatchEvent(new ClipboardEvent('paste', { bubbles: true, cancelable: true, clipboardData: data }));
}"""


def _ready_chips(page, count: int) -> None:
    page.wait_for_function(
        f"document.querySelectorAll('.attach-chip[data-state=ready]').length === {count}", timeout=20000
    )


def test_attach_by_button_and_by_drop_then_send(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "files1")
    photo, report = png(4, 4), pdf(3)

    page.set_input_files("#attach-input", files=[{"name": "photo.png", "mimeType": "image/png", "buffer": photo}])
    _ready_chips(page, 1)
    page.evaluate(DROP, ["report.pdf", "application/pdf", base64.b64encode(report).decode()])
    _ready_chips(page, 2)
    chips = page.locator(".attach-chip").all_text_contents()
    assert "photo.png" in chips[0] and "report.pdf" in chips[1] and "3 p." in chips[1]

    page.fill("#text", "what are these?")
    page.click("#send")
    answer = page.locator(".msg.assistant").last
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=30000)
    text = answer.text_content()
    assert f"photo.png (image/png, {len(photo):,} bytes)" in text
    assert f"report.pdf (application/pdf, 3 pages, {len(report):,} bytes)" in text
    assert page.locator(".attach-chip").count() == 0  # sent: the chips are gone

    def shown() -> None:
        bubble = page.locator(".msg.user").last
        bubble.locator(".attachment img[alt='photo.png']").wait_for()
        page.wait_for_function(
            '(() => { const i = document.querySelector(".msg.user .attachment img");'
            " return i && i.complete && i.naturalWidth === 4; })()",
            timeout=10000,
        )
        assert "report.pdf (3 pages)" in bubble.locator(".attachment").last.text_content()

    shown()
    page.reload()  # replayed from the event log: the opening message's attachments come back
    wait_live(page)
    shown()
    assert sorted(Attachment.objects.values_list("name", flat=True)) == ["photo.png", "report.pdf"]


def test_a_file_that_is_not_an_image_or_pdf_is_refused_in_the_page(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "files2")
    page.set_input_files(
        "#attach-input",
        files=[{"name": "evil.png", "mimeType": "image/png", "buffer": b"<html><script>alert(1)</script>"}],
    )
    page.wait_for_selector("#composer-error:not([hidden])")
    assert "PNG, JPEG, GIF, WebP or PDF" in page.locator("#composer-error").text_content()
    assert page.locator(".attach-chip").count() == 0 and not Attachment.objects.exists()


def test_the_remove_button_drops_an_unsent_file(june_server, make_user, new_page):
    from tests.fault.qcluster import wait_for

    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "files3")
    page.set_input_files(
        "#attach-input",
        files=[
            {"name": "a.png", "mimeType": "image/png", "buffer": png()},
            {"name": "b.png", "mimeType": "image/png", "buffer": png(3, 3)},
        ],
    )
    _ready_chips(page, 2)
    page.locator(".attach-chip", has_text="a.png").get_by_role("button", name="Remove a.png").click()
    _ready_chips(page, 1)
    wait_for(
        lambda: list(Attachment.objects.values_list("name", flat=True)) == ["b.png"],
        timeout=10,
        what="the removed upload's row to go",
    )
    page.fill("#text", "only b")
    page.click("#send")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=30000)
    assert "I received 1 attachment: b.png (image/png" in page.locator(".msg.assistant").last.text_content()


def test_a_pasted_image_is_attached(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "files4")
    page.evaluate(PASTE, ["screenshot.png", "image/png", base64.b64encode(png(5, 5)).decode()])
    _ready_chips(page, 1)
    assert page.locator("#text").input_value() == ""  # the file, not its name, was pasted
    page.click("#send")  # no text: the files alone make a message
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=30000)
    assert "I received 1 attachment: screenshot.png (image/png" in page.locator(".msg.assistant").last.text_content()


def test_the_chat_with_attachments_passes_the_accessibility_audit(june_server, make_user, new_page):
    """axe-core (tests/browser/test_a11y.py's audit): chips with their remove buttons, a
    thumbnail and a PDF link add no serious or critical violation."""
    from tests.browser.test_a11y import audit

    page = open_chat(new_page(make_user("alice")), "ops", "files5")
    page.set_input_files(
        "#attach-input",
        files=[
            {"name": "a.png", "mimeType": "image/png", "buffer": png()},
            {"name": "b.pdf", "mimeType": "application/pdf", "buffer": pdf(1)},
        ],
    )
    _ready_chips(page, 2)
    page.fill("#text", "look")
    page.click("#send")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=30000)
    page.locator(".msg.user .attachment img").wait_for()
    page.set_input_files("#attach-input", files=[{"name": "c.pdf", "mimeType": "application/pdf", "buffer": pdf(1)}])
    _ready_chips(page, 1)
    assert audit(page, "chat with attachments") == []
