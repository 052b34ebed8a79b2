// A minimal chat page on @ai-sdk/react's useChat, pointed at June (tests/browser/test_usechat.py
// bundles it with esbuild and serves it on June's origin). window.JUNE = {api, chat, token}.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport } from "ai";
import { useState } from "react";
import { createRoot } from "react-dom/client";

const { api, chat, token } = window.JUNE;
const transport = new DefaultChatTransport({ api, headers: { Authorization: `Bearer ${token}` } });

function Part({ part }) {
  if (part.type === "text") return <span className="text">{part.text}</span>;
  if (part.type === "dynamic-tool")
    return (
      <code className="tool" data-state={part.state}>
        {part.toolName}
      </code>
    );
  return null;
}

function App({ history }) {
  // June keeps the conversation: the page starts from its history, and resumes a turn under way
  const { messages, sendMessage, status } = useChat({ id: chat, transport, messages: history, resume: true });
  const [input, setInput] = useState("");
  return (
    <main>
      <p id="status">{status}</p>
      <ul id="messages">
        {messages.map((m) => (
          <li key={m.id} className={m.role} data-id={m.id}>
            {m.parts.map((p, i) => (
              <Part key={`${m.id}-${i}`} part={p} />
            ))}
          </li>
        ))}
      </ul>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
        <button type="submit">Send</button>
      </form>
    </main>
  );
}

const response = await fetch(`${api}/${chat}/messages`, { headers: { Authorization: `Bearer ${token}` } });
const { messages: history } = await response.json();
createRoot(document.getElementById("root")).render(<App history={history} />);
