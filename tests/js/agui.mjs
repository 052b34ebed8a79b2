// AG-UI's own client against June: HttpAgent runs a turn, sees its tool call, ends on an
// interrupt (a tool approval), and answers it with a resume run.
// Usage: node agui.mjs '<json: {base, token, agent, thread, text, approve}>'; prints one JSON line.
import { HttpAgent } from "@ag-ui/client";

const args = JSON.parse(process.argv[2]);
const agent = new HttpAgent({
  url: `${args.base}/api/agents/${args.agent}/agui`,
  headers: { Authorization: `Bearer ${args.token}` },
  threadId: args.thread,
});

function recorder() {
  const events = [];
  let outcome = null;
  const subscriber = {
    onEvent: ({ event }) => {
      events.push(event.type);
    },
    onRunFinishedEvent: ({ event }) => {
      outcome = event.outcome ?? { type: "success" };
    },
  };
  return { events, subscriber, outcome: () => outcome };
}

if (args.reattach) {
  // a reload mid-run: the first client goes away after a few deltas; a new one reattaches
  // (a run with no new user message) and gets the whole turn, replayed from June's log
  agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: args.text });
  let deltas = 0;
  await agent.runAgent({}, { onTextMessageContentEvent: () => (++deltas >= 3 ? agent.abortRun() : undefined) }).catch(() => {});
  const fresh = new HttpAgent({ url: agent.url, headers: agent.headers, threadId: args.thread });
  const again = recorder();
  await fresh.runAgent({}, again.subscriber);
  const text = fresh.messages.filter((m) => m.role === "assistant").map((m) => m.content).join("");
  process.stdout.write(`${JSON.stringify({ deltasBeforeReload: deltas, events: again.events, outcome: again.outcome(), text })}\n`);
  process.exit(0);
}

agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: args.text });
const first = recorder();
await agent.runAgent({}, first.subscriber);
const interrupts = first.outcome()?.interrupts ?? [];
const result = { first: first.events, firstOutcome: first.outcome(), state: agent.state };
if (interrupts.length) {
  const second = recorder();
  const resume = interrupts.map((i) => ({
    interruptId: i.id,
    status: "resolved",
    payload: { decision: args.approve ? "approve" : "reject", ...(args.approve ? {} : { message: "not today" }) },
  }));
  await agent.runAgent({ resume }, second.subscriber);
  result.second = second.events;
  result.secondOutcome = second.outcome();
}
result.messages = agent.messages.map((m) => ({ role: m.role, content: m.content, toolCalls: m.toolCalls }));
process.stdout.write(`${JSON.stringify(result)}\n`);
