"""The chat UI in a real Chromium against a real daphne + qcluster (see conftest.py)."""

from __future__ import annotations

from tests.browser.conftest import chat_url, login_with_form, open_chat, send_message, wait_live

# records, in the page, every state a tool row and the streaming text went through
RECORDER = """
() => {
  window.__toolStates = [];
  window.__textLengths = [];
  const log = document.getElementById("log");
  new MutationObserver((records) => {
    for (const r of records) {
      const tool = r.target.closest ? r.target.closest(".tool") : null;
      if (r.type === "attributes" && tool) window.__toolStates.push(tool.dataset.state);
      for (const n of r.addedNodes || []) {
        if (n.classList && n.classList.contains("tool")) window.__toolStates.push(n.dataset.state);
      }
    }
    const streaming = log.querySelector(".msg.assistant.streaming");
    if (streaming) window.__textLengths.push(streaming.textContent.length);
  }).observe(log, {subtree: true, childList: true, attributes: true, attributeFilter: ["data-state"], characterData: true});
}
"""


def test_log_in_send_a_message_and_watch_it_stream_with_the_tool_timeline(june_server, make_user, new_page):
    make_user("alice", "pw-alice-123")
    page = new_page()
    login_with_form(page, "alice", "pw-alice-123")
    page.click("[data-agent=ops] .new-session")
    page.wait_for_url("**/agents/ops/sessions/*/")
    wait_live(page)
    page.evaluate(RECORDER)
    send_message(page, "order mugs")
    page.wait_for_selector(".tool[data-state=completed] >> text=create_order")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    final = page.locator(".msg.assistant").last.text_content()
    assert final.startswith("Done. create_order") and '"item": "mugs"' in final
    assert page.locator(".msg.user").last.text_content() == "order mugs"
    states = page.evaluate("window.__toolStates")
    assert states.index("requested") < states.index("completed"), states
    lengths = page.evaluate("window.__textLengths")
    growing = sorted(set(lengths))
    assert len(growing) >= 3, f"the text did not stream in pieces: {lengths}"
    # the session is listed on the home page afterwards
    page.goto("/")
    assert page.locator("[data-agent=ops] .sessions li").count() == 1


def test_reload_mid_turn_shows_everything_so_far_and_continues(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "essay1")
    send_message(page, "essay")
    page.wait_for_function("(document.querySelector('.msg.assistant.streaming')?.textContent.length || 0) > 40")
    page.reload()
    wait_live(page)
    assert page.locator(".msg.user").last.text_content() == "essay"  # replayed from the log
    # the snapshot brings back the start of the message, then it keeps growing
    page.wait_for_function(
        "document.querySelector('.msg.assistant.streaming')?.textContent.startsWith('Durable execution')"
    )
    before = len(page.locator(".msg.assistant.streaming").text_content())
    page.wait_for_function(f"document.querySelector('.msg.assistant.streaming')?.textContent.length > {before + 20}")
    assert page.locator("#turn-status").get_attribute("data-status") == "running"
    page.click("#cancel")
    page.wait_for_selector('.note >> text="Turn cancelled."')
    assert page.locator("#turn-status").get_attribute("data-status") == "cancelled"


def test_two_tabs_on_one_session_show_the_same_events_live(june_server, make_user, new_page):
    operator = make_user("olga", staff=True, groups=("operators",))
    one = open_chat(new_page(operator), "ops", "shared")
    two = open_chat(new_page(operator), "ops", "shared")
    send_message(one, "stock tea")
    for tab in (one, two):
        tab.wait_for_selector(".tool[data-state=completed] >> text=lookup_stock")
        tab.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
        assert tab.locator(".msg.user").last.text_content() == "stock tea"
    assert one.locator(".msg.assistant").last.text_content() == two.locator(".msg.assistant").last.text_content()
    # an approval card: answered in one tab, it closes live in the other
    send_message(two, "refund order 1 20")
    for tab in (one, two):
        tab.wait_for_selector(".approval[data-state=open]")
    one.click(".approval button:has-text('Approve')")
    for tab in (one, two):
        tab.wait_for_selector(".approval[data-state=answered]")
        tab.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert two.locator(".approval button:has-text('Approve')").is_disabled()


def test_another_user_cannot_open_the_session(june_server, make_user, new_page):
    alice, bob = make_user("alice"), make_user("bob")
    mine = open_chat(new_page(alice), "ops", "private")
    send_message(mine, "stock tea")  # the first message creates the session (opening creates nothing)
    mine.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    page = new_page(bob)
    response = page.goto(chat_url("ops", "private"))
    assert response.status == 403
    page.goto("/")
    code = page.evaluate(
        """() => new Promise((resolve) => {
             const ws = new WebSocket(`ws://${location.host}/ws/agents/ops/sessions/private/`);
             ws.onclose = (ev) => resolve(ev.code);
           })"""
    )
    assert code == 4403
    assert page.locator("[data-agent=ops] .sessions li").count() == 0


def test_text_with_markup_is_shown_escaped(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "xss")
    payload = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    send_message(page, payload)
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert page.locator(".msg.user").last.text_content() == payload
    assert page.locator(".msg.assistant").last.text_content() == f"You said: {payload}"
    assert page.locator("#log script, #log img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_a_turn_that_reached_its_limit_is_marked_in_the_chat_and_after_a_reload(june_server, make_user, new_page):
    """Issue 37: the demo's ``loop forever`` keeps calling a tool; the turn ends at its limit
    with an answer, and the chat says the answer was given at the limit (live and replayed)."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "loop1")
    send_message(page, "loop forever")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=60_000)
    note = page.locator(".note.limited")
    assert note.get_attribute("data-limited") == "model_calls"
    assert "limit of model calls" in note.text_content()
    assert "stopped at this turn's limit" in page.locator(".msg.assistant").last.text_content()
    page.reload()
    wait_live(page)
    page.wait_for_selector(".note.limited")
    assert page.locator(".note.limited").count() == 1


def test_opening_a_session_url_creates_nothing_until_the_first_message(june_server, make_user, new_page):
    """Issue 35 item 7: a GET of any session URL (a typo such as /agents/ops/sessions/doesnotexist/)
    created that session; now the page opens as a new chat and the first message creates it."""
    from sessions_app import models as m

    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "doesnotexist")
    assert page.locator("#session-title").text_content() == "New session"
    page.reload()
    wait_live(page)
    assert not m.Session.objects.filter(key="doesnotexist").exists()
    page.goto("/")
    assert page.locator("[data-agent=ops] .sessions li").count() == 0
    page = open_chat(new_page(alice), "ops", "doesnotexist")
    send_message(page, "stock tea")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert m.Session.objects.get(key="doesnotexist").owner == alice


def test_a_send_refused_while_offline_is_not_said_again_once_live(june_server, make_user, new_page):
    """A send while the socket was down said "Not sent: not connected (reconnecting…)"; once
    the chat was live again the words stayed under the box (the badge said live)."""
    import re

    alice = make_user("alice")
    page = new_page(alice)
    down = {"now": False}
    sockets = []

    def route(ws):
        if down["now"]:  # the server is away: every reconnect is refused
            ws.close()
            return
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r".*/ws/agents/ops/sessions/offline-1/.*"), route)
    open_chat(page, "ops", "offline-1")
    down["now"] = True
    sockets[-1].close()
    page.wait_for_selector("#conn:not([data-state=live])")
    send_message(page, "hello")
    page.wait_for_selector("#composer-error >> text=not connected")
    down["now"] = False
    wait_live(page)
    page.wait_for_selector("#composer-error", state="hidden", timeout=10_000)
    assert page.input_value("#text") == "hello"  # the message is still the person's to send
