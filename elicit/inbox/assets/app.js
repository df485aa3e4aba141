// The fulfiller inbox page: follows /events (Server-Sent Events) and posts
// answers to /answer. Every text from the space is inserted as text, never
// as HTML; the server has already escaped control and bidi characters.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const items = new Map(); // request id → view
const cards = new Map(); // request id → <article>
let skew = 0;            // server clock − our clock, ms
let selected = "";       // request id of the selected open card
let snapshotSeen = false;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function isOpen(v) { return v.state === "open"; }
function inOpenList(v) { return v.state === "open" || v.state === "sending" || v.state === "ending"; }

// ---- the live feed --------------------------------------------------------

function connect() {
  const es = new EventSource("events");
  es.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    skew = new Date(s.now).getTime() - Date.now();
    $("#who").textContent = `answering as ${s.approver} · ${s.signing || "answers are not signed"}`;
    presence(s.fulfillers);
    for (const id of [...cards.keys()]) remove(id);
    for (const v of s.items || []) upsert(v, false);
    snapshotSeen = true;
    setLink("");
    refresh();
  });
  es.addEventListener("item", (e) => { upsert(JSON.parse(e.data), snapshotSeen); refresh(); });
  es.addEventListener("remove", (e) => { remove(JSON.parse(e.data).id); refresh(); });
  es.addEventListener("presence", (e) => presence(JSON.parse(e.data)));
  es.addEventListener("bye", () => {
    // The approver client is stopping: nothing will answer here again.
    es.close();
    stopped("The approver client (fulfiller approve --web) has stopped: these cards can no longer be answered here. Start it again, then open the address it prints.");
  });
  es.onopen = () => { lostSince = 0; };
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      setLink("The inbox refused this page. Open the address `fulfiller approve --web` printed.", true);
      return;
    }
    lostSince = lostSince || Date.now();
    if (Date.now() - lostSince > giveUpAfter) {
      // Still nothing: the client is gone, not a network blip.
      es.close();
      stopped("The inbox has not answered for " + Math.round(giveUpAfter / 1000) + " s: fulfiller approve --web has probably stopped. Start it again, then open the address it prints.");
      return;
    }
    setLink("Connection to the inbox lost; reconnecting…", true);
  };
}

// lostSince is when the stream was lost (0: connected); after giveUpAfter
// of retries the page says the client is gone instead of retrying on.
let lostSince = 0;
const giveUpAfter = 15000;

// stopped says the inbox is gone for good and takes the answers away.
function stopped(text) {
  setLink(text, true);
  for (const card of document.querySelectorAll("[data-proposal] .actions, [data-proposal] .panel")) card.replaceChildren();
}

function setLink(text, lost) {
  const p = $("#link");
  p.textContent = text;
  p.classList.toggle("lost", !!lost);
}

function presence(fulfillers) {
  const p = $("#presence");
  p.replaceChildren();
  const words = { here: "in the space", left: "left the space", absent: "not in the space", unknown: "" };
  for (const [id, where] of Object.entries(fulfillers || {})) {
    if (!words[where]) continue;
    p.append(el("span", { class: where === "here" ? "" : "gone", text: `${id} ${words[where]} ` }));
  }
}

// ---- cards ----------------------------------------------------------------

function upsert(v, live) {
  const old = items.get(v.id);
  if (old && old.seq > v.seq) return;
  items.set(v.id, v);
  let card = cards.get(v.id);
  const fresh = !card;
  if (fresh) {
    card = build(v);
    cards.set(v.id, card);
  }
  const stateChanged = fresh || !old || old.state !== v.state;
  update(card, v, stateChanged);
  const list = inOpenList(v) ? $("#open") : $("#done");
  if (card.parentElement !== list) {
    if (list.id === "done") list.prepend(card); else list.append(card);
  }
  if (live && fresh && isOpen(v)) notifyNew(v);
}

function remove(id) {
  const card = cards.get(id);
  if (card) card.remove();
  cards.delete(id);
  items.delete(id);
  if (selected === id) selected = "";
}

function refresh() {
  const open = [...items.values()].filter(isOpen).length;
  $("#open-count").textContent = String(open);
  $("#empty").hidden = $("#open").children.length > 0;
  document.title = open ? `(${open}) fulfiller inbox` : "fulfiller inbox";
  if (!selected || !items.has(selected) || !isOpen(items.get(selected))) {
    const first = [...$("#open").children].find((c) => isOpen(items.get(c.dataset.request)));
    select(first ? first.dataset.request : "");
  }
  tick();
}

function title(v) {
  if (!v.proposal) return v.message || v.id;
  const what = v.tool || v.method;
  return `${v.proposer} → ${what}${v.server ? " on " + v.server : ""}`;
}

function build(v) {
  const card = $("#card-t").content.firstElementChild.cloneNode(true);
  const tid = "t-" + v.id.replace(/[^A-Za-z0-9_-]/g, "_");
  $(".title", card).id = tid;
  card.setAttribute("aria-labelledby", tid);
  card.addEventListener("click", () => { if (isOpen(items.get(v.id))) select(v.id); });
  $(".unfold", card).addEventListener("click", (e) => {
    const pre = $(".args", card);
    const all = pre.dataset.folded !== "1";
    showArgs(pre, items.get(v.id).arguments || "", !all);
    e.currentTarget.textContent = all ? "Show all" : "Show less";
  });
  return card;
}

function update(card, v, stateChanged) {
  card.dataset.proposal = v.proposal || v.id;
  card.dataset.request = v.id;
  card.dataset.state = v.state;
  $(".title", card).textContent = title(v);
  $(".message", card).textContent = v.message || "";
  facts($(".facts", card), v);
  const pre = $(".args", card);
  const long = (v.arguments || "").split("\n").some((l) => l.length > foldAt) || (v.arguments || "").length > 4 * foldAt;
  $(".args-wrap", card).hidden = !v.arguments;
  showArgs(pre, v.arguments || "", long);
  $(".unfold", card).hidden = !long;
  const dg = $(".digest", card);
  dg.classList.toggle("bad", !!v.proposal && !v.digest_ok);
  dg.textContent = !v.proposal ? "" : v.digest_ok
    ? `call digest ${v.digest}`
    : `The call digest does not match the call shown: it cannot be approved. (${v.digest || "none"})`;
  status($(".status", card), v);
  if (stateChanged) {
    actions(card, v);
    $(".panel", card).replaceChildren();
  }
}

const foldAt = 160;

function showArgs(pre, text, fold) {
  pre.dataset.folded = fold ? "1" : "0";
  if (!fold) { pre.textContent = text; return; }
  const lines = text.split("\n");
  const out = lines.slice(0, 40).map((l) => l.length > foldAt ? `${l.slice(0, foldAt)}… (${l.length - foldAt} more characters)` : l);
  if (lines.length > 40) out.push(`… ${lines.length - 40} more lines`);
  pre.textContent = out.join("\n");
}

function facts(dl, v) {
  dl.replaceChildren();
  const add = (k, val) => { if (val) dl.append(el("dt", { text: k }), el("dd", { text: val })); };
  add("Proposal", v.proposal);
  add("Proposer", v.proposer);
  add("Tool", v.tool ? v.tool + (v.description ? ` — ${v.description}` : "") : v.method);
  add("Server", v.server);
  if (v.annotations) add("Annotations", v.annotations.map((a) => `${a.name}: ${a.value}`).join(", "));
  add("Policy", v.policy_message);
  add("Quorum", quorum(v));
  if (v.delegated_by) add("Handed on by", v.delegated_by.join(" → "));
  if (v.grant) add("Grantable", `You may also allow ${v.grant.terms}, for up to ${v.grant.max_ttl}`);
  add("Asked by", v.fulfiller);
  add("Policy revision", v.revision);
}

function quorum(v) {
  if (!v.approvers || !v.approvers.length) return "";
  const q = v.quorum || 1;
  let s = `${q} of ${v.approvers.length} approvers must approve (${v.approvers.join(", ")})`;
  if (v.peers && v.peers.length) {
    s += q > 1 ? ` — ${v.approvals || 0} of ${q} approvals so far: ` : " — so far: ";
    s += v.peers.join("; ");
  }
  return s;
}

function status(p, v) {
  p.className = "status";
  let text = "";
  switch (v.state) {
    case "sending": text = `Sending: ${v.answer}…`; break;
    case "ending": text = "Ending…"; break;
    case "answered":
      text = `You ${v.answer}.`;
      if (v.approved) {
        text += (v.quorum || 1) > 1 ? ` Your approval is one of the ${v.quorum} needed; waiting for the others.` : " Waiting for the outcome…";
      }
      p.classList.add("ok");
      break;
    case "failed": text = v.note; p.classList.add("bad"); break;
    case "outcome":
      text = `You ${v.answer}. Outcome: ${v.note}.`;
      p.classList.add(v.outcome === "fulfilled" ? "ok" : "bad");
      break;
    case "ended":
      // A contested card (docs/design.md "Proposer identity and grants"):
      // said as a warning, not as one more way a prompt ends.
      text = v.cause === "contested" ? `⚠ ${v.note}.` : `Ended: ${v.note}.`;
      p.classList.add("bad");
      break;
  }
  p.textContent = text;
}

function actions(card, v) {
  const box = $(".actions", card);
  box.replaceChildren();
  if (!isOpen(v)) return;
  if (!v.proposal || v.digest_ok) {
    box.append(el("button", { type: "button", class: "primary", "aria-keyshortcuts": "a", onclick: () => send(v.id, { action: "approve" }, card) }, "Approve"));
    if (v.grant) box.append(el("button", { type: "button", "aria-keyshortcuts": "l", onclick: () => grantForm(card, v) }, "Approve and allow…"));
    if (v.fields && v.fields.length) box.append(el("button", { type: "button", "aria-keyshortcuts": "e", onclick: () => editForm(card, v) }, "Edit"));
  }
  box.append(el("button", { type: "button", class: "danger", "aria-keyshortcuts": "d", onclick: () => declineForm(card, v) }, "Decline"));
  if (v.delegates && v.delegates.length) box.append(el("button", { type: "button", "aria-keyshortcuts": "g", onclick: () => delegateForm(card, v) }, "Delegate"));
  box.append(el("button", { type: "button", "aria-keyshortcuts": "c", onclick: () => send(v.id, { action: "dismiss" }, card) }, "Dismiss"));
}

// ---- forms ----------------------------------------------------------------

let uid = 0;
// labelled is a form field: its label is the field's accessible name
// alone ("Reason", as DESIGN names it), and the hint, outside the label,
// is its description (aria-describedby), so that a screen reader, and a
// test finding the field by name, hear the name without the hint.
function labelled(text, input, hint) {
  input.id = input.id || `f${++uid}`;
  const l = el("label", { for: input.id }, el("span", { text }), input);
  if (!hint) return l;
  const h = el("span", { class: "hint", id: `${input.id}-hint`, text: hint });
  input.setAttribute("aria-describedby", h.id);
  return el("div", { class: "field" }, l, h);
}

function errorLine() { return el("p", { class: "error", role: "alert" }); }

function back(card) {
  return el("button", { type: "button", onclick: () => { $(".panel", card).replaceChildren(); card.focus(); } }, "Back");
}

function declineForm(card, v) {
  const reason = el("textarea", { name: "reason", maxlength: "2000" });
  const err = errorLine();
  const sendBtn = el("button", { type: "button", class: "danger", onclick: () => send(v.id, { action: "decline", reason: reason.value }, card, err) }, "Send");
  reason.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) sendBtn.click(); });
  $(".panel", card).replaceChildren(
    labelled("Reason", reason, "Sent to the proposer with the refusal. Leave it empty to decline without one."),
    err, el("div", { class: "actions" }, sendBtn, back(card)));
  reason.focus();
}

function delegateForm(card, v) {
  const to = el("select", { name: "delegate_to" }, ...v.delegates.map((d) => el("option", { value: d, text: d })));
  const err = errorLine();
  $(".panel", card).replaceChildren(
    labelled("Delegate to", to, "They are asked instead of you."),
    err, el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", onclick: () => send(v.id, { action: "delegate", delegate_to: to.value }, card, err) }, "Hand over"),
      back(card)));
  to.focus();
}

// grantForm approves the call and allows calls like it for a while: the
// terms (exactly what the fulfiller will pin) are shown beside the choice
// of how long.
function grantForm(card, v) {
  const ttl = el("select", { name: "grant" }, ...v.grant.offers.map((d) => el("option", { value: d, text: d })));
  const err = errorLine();
  $(".panel", card).replaceChildren(
    el("p", { class: "grant-terms", text: `Approve this call, and allow ${v.grant.terms} without asking, for:` }),
    labelled("Allow for", ttl, "The grant ends then; the operator can revoke it sooner (fulfiller grants revoke)."),
    err, el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", onclick: () => send(v.id, { action: "approve", grant: ttl.value }, card, err) }, "Approve and allow"),
      back(card)));
  ttl.focus();
}

// proposed is the argument's value as proposed (undefined when the form
// gives none).
function proposed(f) { return f.default; }

function editForm(card, v) {
  const inputs = [];
  const rows = v.fields.map((f) => {
    const cur = proposed(f);
    let input;
    if (f.type === "boolean") {
      input = el("input", { type: "checkbox", name: f.name });
      input.checked = cur === true;
    } else if (f.enum && f.enum.length) {
      input = el("select", { name: f.name }, ...f.enum.map((o) => el("option", { value: o, text: o })));
      if (cur !== undefined) input.value = String(cur);
    } else if (f.type === "integer" || f.type === "number") {
      input = el("input", { type: "text", inputmode: f.type === "integer" ? "numeric" : "decimal", name: f.name });
      if (cur !== undefined) input.value = String(cur);
    } else {
      input = el("input", { type: "text", name: f.name, spellcheck: "false" });
      if (cur !== undefined) input.value = String(cur);
    }
    inputs.push([f, input]);
    return labelled(f.name, input, f.description);
  });
  const reason = el("input", { type: "text", name: "reason", maxlength: "2000" });
  const err = errorLine();
  const review = el("div");
  const reviewBtn = el("button", { type: "button", class: "primary", onclick: () => {
    err.textContent = "";
    const edits = {};
    const changes = [];
    for (const [f, input] of inputs) {
      let val;
      try { val = valueOf(f, input); } catch (e) { err.textContent = e.message; input.focus(); return; }
      if (JSON.stringify(val) !== JSON.stringify(proposed(f))) {
        edits[f.name] = val;
        changes.push([f.name, proposed(f), val]);
      }
    }
    const list = el("ul", { class: "diff", "aria-label": "changes" });
    if (!changes.length) list.append(el("li", { text: "No change: this approves the call as shown." }));
    for (const [name, from, to] of changes) {
      list.append(el("li", {}, `${name}: `, el("del", { text: JSON.stringify(from) }), " → ", el("ins", { text: JSON.stringify(to) })));
    }
    review.replaceChildren(el("h4", { text: "Review" }), list, el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", onclick: () => send(v.id, { action: "approve", edits, reason: reason.value }, card, err) }, "Approve edited call")));
    $("button", review.lastChild).focus();
  } }, "Review changes");
  $(".panel", card).replaceChildren(...rows, labelled("Reason (optional)", reason), err,
    el("div", { class: "actions" }, reviewBtn, back(card)), review);
  if (inputs.length) inputs[0][1].focus();
}

// valueOf reads one edited argument as the form's schema types it.
function valueOf(f, input) {
  const t = input.value;
  switch (f.type) {
    case "boolean": return input.checked;
    case "integer": {
      const n = Number(t.trim());
      if (t.trim() === "" || !Number.isInteger(n)) throw new Error(`${f.name} must be a whole number`);
      return n;
    }
    case "number": {
      const n = Number(t.trim());
      if (t.trim() === "" || !Number.isFinite(n)) throw new Error(`${f.name} must be a number`);
      return n;
    }
    default:
      if (f.enum && f.enum.length && !f.enum.includes(t)) throw new Error(`${f.name} must be one of ${f.enum.join(", ")}`);
      return t;
  }
}

async function send(id, body, card, errLine) {
  body.id = id;
  const show = (msg) => { if (errLine) errLine.textContent = msg; else $(".status", card).textContent = msg; };
  let res;
  try {
    res = await fetch("answer", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), credentials: "same-origin" });
  } catch {
    show("Not sent: the inbox cannot be reached.");
    return;
  }
  if (!res.ok) {
    let msg = `Not sent (${res.status})`;
    try { const j = await res.json(); if (j.error) msg = `Not sent: ${j.error}`; } catch { /* a non-JSON error body */ }
    show(msg);
  }
}

// ---- selection, keys, countdowns, notifications ---------------------------

function select(id) {
  if (selected && cards.has(selected)) cards.get(selected).classList.remove("selected");
  selected = id;
  if (id && cards.has(id)) cards.get(id).classList.add("selected");
}

function openIds() {
  return [...$("#open").children].map((c) => c.dataset.request).filter((id) => isOpen(items.get(id)));
}

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  const typing = t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement;
  const card = selected && cards.get(selected);
  if (e.key === "Escape") {
    if (card) { $(".panel", card).replaceChildren(); card.focus(); }
    return;
  }
  if (typing) return;
  const ids = openIds();
  const i = ids.indexOf(selected);
  const click = (name) => {
    if (!card) return;
    const b = [...$(".actions", card).querySelectorAll("button")].find((x) => x.textContent === name);
    if (b) { e.preventDefault(); b.click(); }
  };
  switch (e.key) {
    case "j": case "ArrowDown":
      if (ids.length) { select(ids[Math.min(i + 1, ids.length - 1)]); cards.get(selected).focus(); e.preventDefault(); }
      break;
    case "k": case "ArrowUp":
      if (ids.length) { select(ids[Math.max(i - 1, 0)]); cards.get(selected).focus(); e.preventDefault(); }
      break;
    case "a": case "y": click("Approve"); break;
    case "e": click("Edit"); break;
    case "l": click("Approve and allow…"); break;
    case "d": case "n": click("Decline"); break;
    case "g": click("Delegate"); break;
    case "c": click("Dismiss"); break;
  }
});

function countdown(ms) {
  if (ms <= 0) return "0s";
  const s = Math.round(ms / 1000);
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}

function tick() {
  const now = Date.now() + skew;
  for (const [id, card] of cards) {
    const v = items.get(id);
    const p = $(".countdown", card);
    if (!v || !inOpenList(v) || !v.deadline) { p.textContent = ""; continue; }
    const left = new Date(v.deadline).getTime() - now;
    p.textContent = `${countdown(left)} left` + (v.deadline_by === "proposer" ? " (the proposer stops waiting then)" : "");
    p.classList.toggle("late", left < 30000);
  }
}

function notifyNew(v) {
  if (!("Notification" in window) || Notification.permission !== "granted" || !document.hidden) return;
  try {
    new Notification("Approval requested", { body: title(v), tag: v.id });
  } catch { /* some platforms only notify from a service worker */ }
}

function setupNotify() {
  const b = $("#notify");
  if (!("Notification" in window) || Notification.permission !== "default") return;
  b.hidden = false;
  b.addEventListener("click", async () => {
    try { await Notification.requestPermission(); } catch { /* refused */ }
    b.hidden = Notification.permission === "default";
  });
}

setupNotify();
setInterval(tick, 1000);
connect();
