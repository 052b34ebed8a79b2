// The AI SDK's own client against June: DefaultChatTransport sends and reconnects, and
// readUIMessageStream folds the chunks into UI messages, exactly as useChat does.
// Usage: node uichat.mjs '<json: {base, token, agent, chat, scenario, ...}>'; prints one JSON
// line of what it saw (tests/integration/test_uimessage_clients.py asserts on it).
import { DefaultChatTransport, readUIMessageStream } from "ai";

const args = JSON.parse(process.argv[2]);
const api = `${args.base}/api/agents/${args.agent}/chat`;
const headers = { Authorization: `Bearer ${args.token}` };
const transport = new DefaultChatTransport({ api, headers });
let counter = 0;
const userMessage = (text) => ({ id: `u${++counter}-${Date.now()}`, role: "user", parts: [{ type: "text", text }] });

// every chunk the transport parsed (validated against ai's own chunk schema), and the messages
async function read(stream, message, stopWhen) {
  const chunks = [];
  const reader = stream.getReader();
  const tee = new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) return controller.close();
      chunks.push(value);
      controller.enqueue(value);
      if (stopWhen?.(value, chunks)) {
        controller.close();
        await reader.cancel();
      }
    },
  });
  let last = message;
  for await (const snapshot of readUIMessageStream({ stream: tee, message })) last = snapshot;
  return { chunks, message: last };
}

async function send(messages, extra = {}, stopWhen, abortController) {
  const stream = await transport.sendMessages({
    chatId: args.chat,
    messages,
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: abortController?.signal,
    ...extra,
  });
  // the reader folds into the message it is given: a copy, so the caller's stays as it sent it
  return read(stream, extra.continueMessage && structuredClone(extra.continueMessage), stopWhen);
}

const types = (chunks) => chunks.map((c) => c.type);
const history = async () => (await (await fetch(`${api}/${args.chat}/messages`, { headers })).json()).messages;
const statusOf = async (promise) => {
  try {
    await promise;
    return 200;
  } catch (err) {
    return err.statusCode ? `${err.statusCode} ${err.responseBody ?? ""}` : String(err);
  }
};

const scenarios = {
  // a tool call, then the history
  async tool() {
    const user = userMessage(args.text);
    const { chunks, message } = await send([user]);
    return { types: types(chunks), message, history: await history() };
  },

  // an approval answered from the client: addToolApprovalResponse's state, sent as the hook sends it
  async approval() {
    const user = userMessage(args.text);
    const first = await send([user]);
    const asked = first.message;
    // a reload while parked: the history and the resume request both show the open approval
    const parkedHistory = await history();
    const replay = await read(await transport.reconnectToStream({ chatId: args.chat }), undefined);
    const answered = {
      ...asked,
      parts: asked.parts.map((p) =>
        p.state === "approval-requested" ? { ...p, state: "approval-responded", approval: { ...p.approval, approved: args.approve, reason: args.reason } } : p,
      ),
    };
    const second = await send([user, answered], { messageId: asked.id, continueMessage: answered });
    const again = await statusOf(send([user, answered], { messageId: asked.id, continueMessage: answered }));
    return { first: types(first.chunks), asked, parkedHistory, replay: types(replay.chunks), replayMessage: replay.message, second: types(second.chunks), message: second.message, again };
  },

  // a person's message with a file part (a data: URL, as sendMessage({ files }) makes it)
  async file() {
    const user = { ...userMessage(args.text), parts: [{ type: "text", text: args.text }, { type: "file", mediaType: "image/png", filename: "dot.png", url: args.dataUrl }] };
    const { chunks, message } = await send([user]);
    return { types: types(chunks), message, history: await history() };
  },

  // a question only an operator may answer: shown as waiting; answering it from the chat is refused
  async waiting() {
    const user = userMessage(args.text);
    const first = await send([user]);
    const fake = {
      ...first.message,
      parts: [
        ...first.message.parts,
        { type: "dynamic-tool", toolName: "issue_refund", toolCallId: "x", state: "approval-responded", input: {}, approval: { id: args.inputId ?? "approve:x", approved: true } },
      ],
    };
    const answer = await statusOf(send([user, fake], { messageId: first.message.id, continueMessage: fake }));
    const cancel = (await fetch(`${api}/${args.chat}/cancel`, { method: "POST", headers })).status;
    return { types: types(first.chunks), message: first.message, answer, cancel };
  },

  // stop: the fetch aborted (what useChat's stop() does) and the cancel said out loud
  async cancel() {
    const user = userMessage(args.text);
    const abort = new AbortController();
    const seen = await send([user], {}, (_c, all) => {
      const enough = all.filter((x) => x.type === "text-delta").length >= 3;
      if (enough) abort.abort();
      return enough;
    }, abort).catch((e) => ({ error: String(e) }));
    const cancelled = await fetch(`${api}/${args.chat}/cancel`, { method: "POST", headers });
    const body = cancelled.status === 200 ? await cancelled.json() : null;
    // a running turn stops at its next checkpoint: June's turn API says when
    const turnUrl = `${args.base}/api/agents/${args.agent}/sessions/${args.chat}/turns/${body?.turn_id}`;
    const deadline = Date.now() + 60_000;
    while ((await (await fetch(turnUrl, { headers })).json()).status !== "cancelled" && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    const after = await transport.reconnectToStream({ chatId: args.chat });
    return { seen: seen.chunks ? types(seen.chunks) : seen, cancelStatus: cancelled.status, turn: body, resumeAfter: after };
  },

  // a reload mid-turn: the first request dropped after a few deltas, then the hook's resume request
  async reload() {
    const user = userMessage(args.text);
    const dropped = await send([user], {}, (_c, all) => all.filter((x) => x.type === "text-delta").length >= 3);
    const stream = await transport.reconnectToStream({ chatId: args.chat });
    const resumed = await read(stream, undefined);
    return { dropped: types(dropped.chunks), droppedText: textOf(dropped.message), resumed: types(resumed.chunks), message: resumed.message, history: await history() };
  },

  // regenerate the last reply: June's branch
  async regenerate() {
    const user = userMessage(args.text);
    const first = await send([user]);
    const again = await transport.sendMessages({ chatId: args.chat, messages: [user], trigger: "regenerate-message", messageId: first.message.id });
    const second = await read(again, undefined);
    return { first: first.message, second: second.message, types: types(second.chunks), history: await history() };
  },
};

function textOf(message) {
  return (message?.parts ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
}

const result = await scenarios[args.scenario]();
process.stdout.write(`${JSON.stringify(result)}\n`);
