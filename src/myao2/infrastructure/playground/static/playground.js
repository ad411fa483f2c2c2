// The playground page: sends messages, shows replies as they stream in, keeps the memo panel current.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const $ = (id) => document.getElementById(id);
let conversation = "";
let memoState = new Map(); // name -> revision, to highlight what a reply changed

function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  return fetch(path, { ...options, headers });
}

async function getJson(path) {
  const response = await api(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function clock(iso) {
  return new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function scrollDown() {
  const list = $("messages");
  list.scrollTop = list.scrollHeight;
}

function bubble(message) {
  const item = document.createElement("li");
  item.className = `bubble ${message.bot ? "bot" : "user"}`;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = message.user;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = message.text;
  const time = document.createElement("time");
  if (message.time) {
    time.dateTime = message.time;
    time.textContent = clock(message.time);
  }
  item.append(who, text, time);
  $("messages").append(item);
  scrollDown();
  return item;
}

function showError(message) {
  const item = document.createElement("li");
  item.className = "error";
  item.setAttribute("role", "alert");
  item.textContent = message;
  $("messages").append(item);
  scrollDown();
}

function typing(on) {
  $("typing").hidden = !on;
  if (on) scrollDown();
}

async function loadMessages() {
  $("messages").replaceChildren();
  const { messages } = await getJson(`/api/messages?conversation=${encodeURIComponent(conversation)}`);
  messages.forEach(bubble);
}

async function loadMemos(highlight) {
  const { memos } = await getJson(`/api/memos?conversation=${encodeURIComponent(conversation)}`);
  const list = $("memos");
  list.replaceChildren();
  const seen = new Map();
  for (const memo of memos) {
    seen.set(memo.name, memo.revision);
    const item = document.createElement("li");
    item.dataset.name = memo.name;
    const name = document.createElement("div");
    name.className = "memo-name";
    name.textContent = memo.name;
    const meta = document.createElement("div");
    meta.className = "memo-meta";
    const tags = memo.tags.length ? ` · ${memo.tags.map((t) => `#${t}`).join(" ")}` : "";
    meta.textContent = `priority ${memo.priority}${tags}${memo.private ? " · this conversation only" : ""}`;
    const content = document.createElement("div");
    content.className = "memo-content";
    content.textContent = memo.content;
    item.append(name, meta, content);
    if (highlight && memoState.get(memo.name) !== memo.revision) item.classList.add("changed");
    list.append(item);
  }
  if (!memos.length) list.innerHTML = '<li class="empty">No memos yet.</li>';
  memoState = seen;
}

async function loadMemory() {
  const { memory } = await getJson(`/api/memory?conversation=${encodeURIComponent(conversation)}`);
  const list = $("memory");
  list.replaceChildren();
  for (const part of memory) {
    for (const note of part.notes) {
      const item = document.createElement("li");
      item.textContent = `${part.label || "workspace"} (${part.term}): ${note.text}`;
      list.append(item);
    }
  }
  if (!list.children.length) list.innerHTML = '<li class="empty">Nothing remembered yet.</li>';
}

async function refreshPanel(highlight) {
  try {
    await Promise.all([loadMemos(highlight), loadMemory()]);
  } catch (error) {
    showError(`Could not load the panel: ${error.message}`);
  }
}

async function openConversation() {
  conversation = $("conversation").value;
  typing(false);
  localStorage.setItem("playground.conversation", conversation);
  try {
    await loadMessages();
  } catch (error) {
    showError(`Could not load the messages: ${error.message}`);
  }
  await refreshPanel(false);
}

// Parses a text/event-stream body into {event, data} objects as it arrives.
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      yield { event, data: JSON.parse(data) };
    }
  }
}

class Reply {
  constructor() {
    this.item = null;
    this.notes = new Map();
  }
  ensure() {
    if (!this.item) this.item = bubble({ bot: true, user: $("bot-name").textContent, text: "" });
    return this.item;
  }
  append(text) {
    typing(false);
    this.ensure().querySelector(".text").textContent += text;
    scrollDown();
  }
  tool(data) {
    const item = this.ensure();
    let note = this.notes.get(data.id);
    if (!note) {
      if (!data.title) return;
      note = document.createElement("span");
      note.className = "note";
      note.dataset.title = data.title;
      item.insertBefore(note, item.querySelector(".text"));
      this.notes.set(data.id, note);
    }
    const mark = { started: "…", done: "✓", failed: "✗" }[data.status];
    note.className = `note ${data.status}`;
    note.textContent = `✎ ${note.dataset.title} ${mark}`;
    scrollDown();
  }
  done(data) {
    const item = this.ensure();
    item.querySelector(".text").textContent = data.text;
    const time = item.querySelector("time");
    time.dateTime = data.time;
    time.textContent = clock(data.time);
  }
}

async function send(text) {
  const name = $("name").value.trim();
  if (!name) {
    showError("Give a name to speak as.");
    return;
  }
  localStorage.setItem("playground.name", name);
  const here = conversation; // a reply goes on when another conversation is opened, but is shown only here
  typing(true);
  const reply = new Reply();
  try {
    const response = await api("/api/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ conversation, user: name, text }),
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error || `${response.status} ${response.statusText}`);
    }
    for await (const { event, data } of events(response)) {
      if (conversation !== here) continue;
      if (event === "message") bubble(data);
      else if (event === "delta") reply.append(data.text);
      else if (event === "tool") reply.tool(data);
      else if (event === "error") showError(data.message);
      else if (event === "done") reply.done(data);
    }
  } catch (error) {
    if (conversation === here) showError(`The message could not be sent: ${error.message}`);
  } finally {
    if (conversation === here) {
      typing(false);
      await refreshPanel(true);
    }
  }
}

function setUp(info) {
  $("bot-name").textContent = info.bot.name;
  $("avatar").alt = info.bot.name;
  $("avatar").src = token ? `/avatar?token=${encodeURIComponent(token)}` : "/avatar";
  const select = $("conversation");
  for (const c of info.conversations) {
    const option = document.createElement("option");
    option.value = c.id;
    option.textContent = c.kind === "im" ? `DM with ${info.bot.name}` : `#${c.name}${c.private ? " (private)" : ""}`;
    select.append(option);
  }
  const saved = localStorage.getItem("playground.conversation");
  if (info.conversations.some((c) => c.id === saved)) select.value = saved;
  $("name").value = localStorage.getItem("playground.name") || "guest";
  select.addEventListener("change", openConversation);
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("text").value;
    if (!text.trim()) return;
    $("text").value = "";
    send(text);
  });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  openConversation();
}

getJson("/api/conversations").then(setUp, (error) => showError(`The playground is not reachable: ${error.message}`));
