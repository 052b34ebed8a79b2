// The socket: one per session (the replay of the event log after `lastSeq`, then live events),
// reconnecting with a growing pause unless the server closed it for good.
import { config } from "./config.js";
import { $ } from "./dom.js";
import { showError } from "./log.js";
import { state } from "./state.js";

const FINAL_CLOSE = { 4400: "bad request", 4401: "please log in again", 4403: "this session is not yours", 4404: "no such agent" };
let socket = null;
let retryMs = 500;
let nextFrameId = 1;

export function setConn(status) {
  const badge = $("conn");
  badge.dataset.state = status;
  badge.textContent = status === "live" ? "live" : status + (status === "closed" ? "" : "…");
}

// onFrame(frame) for each frame in; onDrop() when the socket closes
export function connect(onFrame, onDrop) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(`${scheme}//${location.host}${config.ws_path}?after=${state.lastSeq}`);
  setConn("connecting");
  socket.onopen = () => { retryMs = 500; };
  socket.onmessage = (msg) => {
    let frame;
    try {
      frame = JSON.parse(msg.data);
    } catch {
      return;
    }
    onFrame(frame);
  };
  socket.onclose = (ev) => {
    state.ready = false;
    onDrop();
    if (FINAL_CLOSE[ev.code]) {
      setConn("closed");
      showError(`Disconnected: ${FINAL_CLOSE[ev.code]}.`);
      return;
    }
    setConn("reconnecting");
    setTimeout(() => connect(onFrame, onDrop), retryMs);
    retryMs = Math.min(retryMs * 2, 8000);
  };
}

export const connected = () => socket !== null && socket.readyState === WebSocket.OPEN;

// a frame out, with its id (the server's ack or error names it); `card`: the approval card an
// error shows on. False when not connected (the page says so).
export function send(frame, card) {
  if (!connected()) {
    showError("Not connected yet; try again in a moment.");
    return false;
  }
  frame.id = nextFrameId++;
  if (card) state.pendingFrames.set(frame.id, card);
  socket.send(JSON.stringify(frame));
  return true;
}

// the composer's frame: its own error handling (composer.js)
export function sendQuiet(frame) {
  frame.id = nextFrameId++;
  socket.send(JSON.stringify(frame));
  return frame.id;
}
