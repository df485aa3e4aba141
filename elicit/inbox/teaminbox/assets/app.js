"use strict";
// The team inbox page: enrol, sign in, list your cards, answer them with
// your passkey. The server builds each challenge from the answer's signed
// approval bytes; the passkey signs it; fulfiller checks the signature.

const b64u = {
  enc(buf) {
    let s = "";
    for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  },
  dec(str) {
    const s = atob(str.replace(/-/g, "+").replace(/_/g, "/"));
    return Uint8Array.from(s, (c) => c.charCodeAt(0));
  },
};

const $ = (id) => document.getElementById(id);
function say(text) { $("status").textContent = text; }

async function api(path, body) {
  const r = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await r.json();
  if (!r.ok) {
    const e = new Error(data.error || r.statusText);
    e.status = r.status;
    throw e;
  }
  return data;
}

function requestOptions(pk) {
  const o = { challenge: b64u.dec(pk.challenge), timeout: pk.timeout, rpId: pk.rpId, userVerification: pk.userVerification };
  o.allowCredentials = (pk.allowCredentials || []).map((c) => ({ type: c.type, id: b64u.dec(c.id) }));
  return o;
}

function assertionJSON(cred) {
  const r = cred.response;
  const out = {
    id: cred.id, rawId: b64u.enc(cred.rawId), type: cred.type,
    response: {
      authenticatorData: b64u.enc(r.authenticatorData),
      clientDataJSON: b64u.enc(r.clientDataJSON),
      signature: b64u.enc(r.signature),
    },
  };
  if (r.userHandle) out.response.userHandle = b64u.enc(r.userHandle);
  return out;
}

async function enrol(token) {
  const begin = await api("/api/enrol/begin", { token });
  const pk = begin.publicKey;
  const cred = await navigator.credentials.create({ publicKey: {
    rp: pk.rp, challenge: b64u.dec(pk.challenge), timeout: pk.timeout,
    user: { id: b64u.dec(pk.user.id), name: pk.user.name, displayName: pk.user.displayName },
    pubKeyCredParams: pk.pubKeyCredParams, attestation: pk.attestation, authenticatorSelection: pk.authenticatorSelection,
  } });
  const credential = {
    id: cred.id, rawId: b64u.enc(cred.rawId), type: cred.type,
    response: { clientDataJSON: b64u.enc(cred.response.clientDataJSON), attestationObject: b64u.enc(cred.response.attestationObject) },
  };
  const done = await api("/api/enrol/finish", { ceremony: begin.ceremony, credential });
  history.replaceState(null, "", "/");
  say("Passkey enrolled for " + done.approver + ".");
  start();
}

async function login(approver) {
  const begin = await api("/api/login/begin", { approver });
  const cred = await navigator.credentials.get({ publicKey: requestOptions(begin.publicKey) });
  await api("/api/login/finish", { ceremony: begin.ceremony, credential: assertionJSON(cred) });
  say("");
  start();
}

// answer sends one answer about card c: the server checks it against the
// card and makes the challenge, the passkey signs it, the server relays
// it. body is the choice in the approver client's terms ({action,
// approve, reason, edits, delegate_to, grant}); errors go to errLine (a
// form's) or the page's status line.
async function answer(c, body, errLine) {
  const show = (msg) => { if (errLine) { say(""); errLine.textContent = msg; } else say(msg); };
  body.request = c.request;
  try {
    const begin = await api("/api/answer/begin", body);
    // What the passkey is about to sign, in words, while the device asks.
    say("Confirm with your passkey: " + begin.answer);
    const cred = await navigator.credentials.get({ publicKey: requestOptions(begin.publicKey) });
    const done = await api("/api/answer/finish", { ceremony: begin.ceremony, credential: assertionJSON(cred) });
    say("Sent: " + done.sent);
  } catch (e) {
    show("Not sent: " + e.message);
  }
  refresh();
}

// el makes an element: attrs are attributes, but "text" sets its text
// (never HTML) and on* adds a listener.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

// setText changes an element's text only when it changed: the page
// refreshes every second, and rewriting the same text would lose a
// selection the approver is making.
function setText(e, text) { if (e.textContent !== text) e.textContent = text; }

// deadline says an RFC 3339 deadline as a person reads it: the local
// time and how long is left ("Answer by 14:05 (4 min left)"), with the
// exact instant in a <time> element's datetime and title.
function deadline(p, c) {
  p.hidden = !c.deadline || c.state !== "open";
  if (p.hidden) return;
  const d = new Date(c.deadline);
  if (isNaN(d)) { setText(p, "Deadline " + c.deadline); return; }
  const mins = Math.round((d - Date.now()) / 60000);
  const left = mins > 0 ? " (" + mins + " min left)" : mins === 0 ? " (less than a minute left)" : " (passed)";
  const by = c.deadline_by === "proposer" ? " The proposer stops waiting then." : "";
  const key = c.deadline + left + by;
  if (p.dataset.key === key) return;
  p.dataset.key = key;
  p.classList.toggle("late", d - Date.now() < 60000);
  p.replaceChildren("Answer by ", el("time", { datetime: c.deadline, title: d.toString(), text: d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }), left + by);
}

// A notification's link names its card in the fragment (#proposal=ID):
// the page marks that card, and scrolls it into view once (again when
// another link is followed into the open page).
let linked = "";
let scrolled = false;
function follow() {
  linked = new URLSearchParams(location.hash.slice(1)).get("proposal") || "";
  scrolled = false;
}
follow();
window.addEventListener("hashchange", () => { follow(); refresh(); });

// views are the cards shown, by request id: each card is built once and
// then updated in place, so that a form the approver opened on it (a
// reason typed, a duration picked) stays while the page refreshes.
const views = new Map(); // request → { a: <article>, c: the card as last seen }
let selected = "";       // request id of the card the keys act on

function render(cards) {
  const box = $("cards");
  const seen = new Set();
  let empty = box.querySelector(":scope > p.empty");
  if (cards.length === 0 && !empty) box.prepend(empty = el("p", { class: "empty", text: "Nothing waits for you." }));
  if (cards.length > 0 && empty) empty.remove();
  cards.forEach((c, i) => {
    seen.add(c.request);
    let v = views.get(c.request);
    if (!v) {
      v = { a: build(c), c: null };
      views.set(c.request, v);
    }
    update(v, c);
    // Moved only when out of place: moving a card would blur its form.
    const at = box.querySelectorAll(":scope > article")[i];
    if (at !== v.a) box.insertBefore(v.a, at || null);
  });
  for (const [id, v] of views) {
    if (!seen.has(id)) { v.a.remove(); views.delete(id); }
  }
  const open = cards.filter((c) => c.state === "open");
  document.title = open.length ? "(" + open.length + ") Approvals" : "Approvals";
  if (!open.some((c) => c.request === selected)) select(open.length ? open[0].request : "");
}

function build(c) {
  const a = el("article", { "data-proposal": c.proposal, "data-request": c.request, tabindex: "-1" },
    el("h2", { class: "title" }), el("p", { class: "message" }), el("dl", { class: "facts" }),
    el("div", { class: "args-wrap" }, el("pre", { class: "args" }), el("button", { type: "button", class: "unfold", hidden: "" }, "Show all")),
    el("p", { class: "digest" }), el("p", { class: "deadline" }), el("p", { class: "progress" }),
    el("p", { class: "card-status", role: "status" }), el("p", { class: "outcome" }),
    el("div", { class: "actions", role: "group", "aria-label": "answer" }), el("div", { class: "panel" }));
  a.addEventListener("click", () => { const v = views.get(c.request); if (v && v.c.state === "open") select(c.request); });
  part(a, "unfold").addEventListener("click", (e) => {
    const pre = part(a, "args");
    const all = pre.dataset.folded === "1";
    showArgs(pre, views.get(c.request).c.arguments, !all);
    e.currentTarget.textContent = all ? "Show less" : "Show all";
  });
  return a;
}

function part(a, cls) { return a.querySelector(":scope ." + cls); }

function update(v, c) {
  const a = v.a;
  const was = v.c;
  v.c = c;
  a.dataset.state = c.state;
  setText(part(a, "title"), c.summary);
  setText(part(a, "message"), c.message);
  facts(part(a, "facts"), c);
  const pre = part(a, "args");
  part(a, "args-wrap").hidden = !c.arguments;
  if (!was || was.arguments !== c.arguments) {
    const lines = c.arguments.split("\n");
    const long = lines.length > 40 || lines.some((l) => l.length > foldAt);
    showArgs(pre, c.arguments, long);
    part(a, "unfold").hidden = !long;
  }
  const dg = part(a, "digest");
  dg.classList.toggle("bad", !!c.proposal && !c.digest_ok);
  setText(dg, !c.proposal ? "" : c.digest_ok ? "Call digest " + c.digest
    : "The call digest does not match the call shown: it cannot be approved. (" + (c.digest || "none") + ")");
  deadline(part(a, "deadline"), c);
  setText(part(a, "progress"), c.progress || (c.quorum > 1 ? "Needs " + c.quorum + " approvals." : ""));
  const st = part(a, "card-status");
  // A contested card (docs/design.md "Proposer identity and grants"):
  // said as a warning, not as one more way a prompt ends.
  setText(st, c.cause === "contested" ? "⚠ " + c.status + "." : c.status);
  st.classList.toggle("bad", c.state === "ended");
  setText(part(a, "outcome"), c.outcome);
  if (!was || was.state !== c.state) {
    actions(a, c);
    part(a, "panel").replaceChildren();
  }
  if (linked && c.proposal === linked) {
    a.classList.add("linked");
    if (!scrolled) a.scrollIntoView({ block: "start" });
    scrolled = true;
  } else {
    a.classList.remove("linked");
  }
}

// foldAt is the longest argument line shown whole until "Show all".
const foldAt = 160;

function showArgs(pre, text, fold) {
  pre.dataset.folded = fold ? "1" : "0";
  if (!fold) { setText(pre, text); return; }
  const lines = text.split("\n");
  const out = lines.slice(0, 40).map((l) => l.length > foldAt ? l.slice(0, foldAt) + "… (" + (l.length - foldAt) + " more characters)" : l);
  if (lines.length > 40) out.push("… " + (lines.length - 40) + " more lines");
  setText(pre, out.join("\n"));
}

// facts are what approve --web's card says of the call besides its
// title: the tool as its owner describes it, its annotations, the
// policy's message, who decides, who handed it on, what a grant would
// allow, who asks.
function facts(dl, c) {
  const rows = [];
  const add = (k, val) => { if (val) rows.push([k, val]); };
  add("Tool", c.tool ? c.tool + (c.description ? " — " + c.description : "") : "");
  if (c.annotations.length) add("Annotations", c.annotations.map((x) => x.name + ": " + x.value).join(", "));
  if (!c.message.includes(c.policy_message)) add("Policy", c.policy_message);
  if (c.approvers.length) add("Approvers", (c.quorum || 1) + " of " + c.approvers.length + " must approve (" + c.approvers.join(", ") + ")");
  if (c.delegated_by.length) add("Handed on by", c.delegated_by.join(" → "));
  if (c.grant) add("Grantable", "You may also allow " + c.grant.terms + ", for up to " + c.grant.max_ttl);
  add("Asked by", c.fulfiller);
  add("Policy revision", c.revision);
  const key = JSON.stringify(rows);
  if (dl.dataset.key === key) return;
  dl.dataset.key = key;
  dl.replaceChildren(...rows.flatMap(([k, val]) => [el("dt", { text: k }), el("dd", { text: val })]));
}

// actions are the answers an open card takes, as approve --web offers
// them; each one asks the passkey to sign it.
function actions(a, c) {
  const box = part(a, "actions");
  box.replaceChildren();
  if (c.state !== "open") return;
  const button = (text, key, onclick, cls) => el("button", { type: "button", "aria-keyshortcuts": key, class: cls || "", onclick }, text);
  if (!c.proposal || c.digest_ok) {
    box.append(button("Approve", "a", () => answer(c, { action: "accept", approve: true }), "primary"));
    if (c.grant) box.append(button("Approve and allow…", "l", () => grantForm(a, c)));
    if (c.fields.length) box.append(button("Edit", "e", () => editForm(a, c)));
  }
  box.append(button("Decline", "d", () => declineForm(a, c), "danger"));
  if (c.delegates.length) box.append(button("Delegate", "g", () => delegateForm(a, c)));
  box.append(button("Dismiss", "c", () => answer(c, { action: "cancel" })));
}

// ---- forms ----------------------------------------------------------------

let uid = 0;
// labelled is a form field: its label is the field's accessible name
// alone, and the hint, outside the label, is its description.
function labelled(text, input, hint) {
  input.id = input.id || "f" + (++uid);
  const l = el("label", { for: input.id, text });
  if (!hint) return el("div", { class: "field" }, l, input);
  const h = el("span", { class: "hint", id: input.id + "-hint", text: hint });
  input.setAttribute("aria-describedby", h.id);
  return el("div", { class: "field" }, l, input, h);
}

function errorLine() { return el("p", { class: "error", role: "alert" }); }

function back(a) {
  return el("button", { type: "button", onclick: () => { part(a, "panel").replaceChildren(); a.focus(); } }, "Back");
}

function declineForm(a, c) {
  const reason = el("textarea", { name: "reason", maxlength: "2000", id: "reason-" + c.request });
  const err = errorLine();
  // An empty reason declines; a reason travels as an accept that does
  // not approve (MCP's decline carries no content).
  const send = el("button", { type: "button", class: "danger", onclick: () => answer(c, reason.value
    ? { action: "accept", approve: false, reason: reason.value } : { action: "decline" }, err) }, "Send");
  reason.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send.click(); });
  part(a, "panel").replaceChildren(
    labelled("Reason", reason, "Sent to the proposer with the refusal. Leave it empty to decline without one."),
    err, el("div", { class: "actions" }, send, back(a)));
  reason.focus();
}

function delegateForm(a, c) {
  const to = el("select", { name: "delegate_to" }, ...c.delegates.map((d, i) => el("option", { value: d, text: c.delegate_labels[i] })));
  const err = errorLine();
  part(a, "panel").replaceChildren(
    labelled("Delegate to", to, "They are asked instead of you."),
    err, el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", onclick: () => answer(c, { action: "accept", delegate_to: to.value }, err) }, "Hand over"),
      back(a)));
  to.focus();
}

// grantForm approves the call and allows calls like it for a while: the
// terms (exactly what the fulfiller will pin) are shown beside the choice
// of how long, and the passkey signs the duration with the approval.
function grantForm(a, c) {
  const ttl = el("select", { name: "grant" }, ...c.grant.offers.map((d, i) => el("option", { value: d, text: c.grant.offer_labels[i] })));
  const err = errorLine();
  part(a, "panel").replaceChildren(
    el("p", { class: "grant-terms", text: "Approve this call, and allow " + c.grant.terms + " without asking, for:" }),
    labelled("Allow for", ttl, "The grant ends then; the operator can revoke it sooner (fulfiller grants revoke)."),
    err, el("div", { class: "actions" },
      el("button", { type: "button", class: "primary", onclick: () => answer(c, { action: "accept", approve: true, grant: ttl.value }, err) }, "Approve and allow"),
      back(a)));
  ttl.focus();
}

// proposed is the argument's value as proposed (undefined: none given).
function proposed(f) { return f.default; }

// editForm changes editable arguments, shows the changes for review, and
// approves the edited call; the passkey signs the edits with it.
function editForm(a, c) {
  const inputs = [];
  const rows = c.fields.map((f) => {
    const cur = proposed(f);
    let input;
    if (f.type === "boolean") {
      input = el("input", { type: "checkbox", name: f.name });
      input.checked = cur === true;
    } else if (f.enum && f.enum.length) {
      input = el("select", { name: f.name }, ...f.enum.map((o, i) => el("option", { value: o, text: f.enum_labels[i] })));
      if (cur !== undefined) input.value = String(cur);
    } else {
      const mode = f.type === "integer" ? { inputmode: "numeric" } : f.type === "number" ? { inputmode: "decimal" } : { spellcheck: "false", autocapitalize: "off" };
      input = el("input", Object.assign({ type: "text", name: f.name }, mode));
      if (cur !== undefined) input.value = String(cur);
    }
    inputs.push([f, input]);
    return labelled(f.label, input, f.description);
  });
  const reason = el("input", { type: "text", name: "reason", maxlength: "2000" });
  const err = errorLine();
  const review = el("div", { class: "review" });
  const reviewBtn = el("button", { type: "button", class: "primary", onclick: () => {
    err.textContent = "";
    const edits = {};
    const changes = [];
    for (const [f, input] of inputs) {
      let val;
      try { val = valueOf(f, input); } catch (e) { err.textContent = e.message; input.focus(); return; }
      if (JSON.stringify(val) !== JSON.stringify(proposed(f))) {
        edits[f.name] = val;
        changes.push([f.label, proposed(f), val]);
      }
    }
    const list = el("ul", { class: "diff", "aria-label": "changes" });
    if (!changes.length) list.append(el("li", { text: "No change: this approves the call as shown." }));
    for (const [name, from, to] of changes) {
      list.append(el("li", {}, name + ": ", el("del", { text: JSON.stringify(from) }), " → ", el("ins", { text: JSON.stringify(to) })));
    }
    const approve = el("button", { type: "button", class: "primary", onclick: () => answer(c, { action: "accept", approve: true, edits, reason: reason.value }, err) }, "Approve edited call");
    review.replaceChildren(el("h3", { text: "Review" }), list, el("div", { class: "actions" }, approve));
    approve.focus();
  } }, "Review changes");
  part(a, "panel").replaceChildren(...rows, labelled("Reason (optional)", reason), err,
    el("div", { class: "actions" }, reviewBtn, back(a)), review);
  if (inputs.length) inputs[0][1].focus();
}

// valueOf reads one edited argument as the form's schema types it (the
// server checks it again).
function valueOf(f, input) {
  const t = input.value;
  switch (f.type) {
    case "boolean": return input.checked;
    case "integer": {
      const n = Number(t.trim());
      if (t.trim() === "" || !Number.isInteger(n)) throw new Error(f.label + " must be a whole number");
      return n;
    }
    case "number": {
      const n = Number(t.trim());
      if (t.trim() === "" || !Number.isFinite(n)) throw new Error(f.label + " must be a number");
      return n;
    }
    default:
      if (f.enum && f.enum.length && !f.enum.includes(t)) throw new Error(f.label + " must be one of " + f.enum_labels.join(", "));
      return t;
  }
}

// ---- selection and keys (approve --web's) ------------------------------------

function select(id) {
  const old = views.get(selected);
  if (old) old.a.classList.remove("selected");
  selected = id;
  const v = views.get(id);
  if (v) v.a.classList.add("selected");
}

function openIds() {
  return [...views.values()].filter((v) => v.c.state === "open" && v.a.isConnected)
    .sort((x, y) => x.a.compareDocumentPosition(y.a) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1)
    .map((v) => v.c.request);
}

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const t = e.target;
  const typing = t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement;
  const v = selected && views.get(selected);
  if (e.key === "Escape") {
    if (v) { part(v.a, "panel").replaceChildren(); v.a.focus(); }
    return;
  }
  if (typing || $("cards").hidden) return;
  const ids = openIds();
  const i = ids.indexOf(selected);
  const click = (name) => {
    if (!v) return;
    const b = [...part(v.a, "actions").querySelectorAll("button")].find((x) => x.textContent === name);
    if (b) { e.preventDefault(); b.click(); }
  };
  const move = (j) => {
    if (!ids.length) return;
    select(ids[Math.max(0, Math.min(j, ids.length - 1))]);
    views.get(selected).a.focus();
    e.preventDefault();
  };
  switch (e.key) {
    case "j": case "ArrowDown": move(i + 1); break;
    case "k": case "ArrowUp": move(i - 1); break;
    case "a": case "y": click("Approve"); break;
    case "e": click("Edit"); break;
    case "l": click("Approve and allow…"); break;
    case "d": case "n": click("Decline"); break;
    case "g": click("Delegate"); break;
    case "c": click("Dismiss"); break;
  }
});

let timer = null;
async function refresh() {
  try {
    const data = await api("/api/cards");
    $("who").textContent = data.approver;
    $("login").hidden = true;
    $("logout-button").hidden = false;
    $("cards").hidden = false;
    $("keys").hidden = false;
    render(data.cards);
  } catch (e) {
    if (e.status === 401) { signedOut(); return; }
    say(e.message);
  }
  clearTimeout(timer);
  timer = setTimeout(refresh, 1000);
}

// signedOut shows the sign-in form and nothing of the cards: after a
// sign-out, and when the session ended (a re-enrolment, inbox revoke).
function signedOut() {
  clearTimeout(timer);
  $("who").textContent = "";
  $("logout-button").hidden = true;
  $("login").hidden = false;
  $("cards").replaceChildren();
  $("cards").hidden = true;
  $("keys").hidden = true;
  views.clear();
  selected = "";
}

async function logout() {
  await api("/api/logout", {});
  signedOut();
  say("Signed out.");
}

// start shows the cards when the browser has a session, else the
// sign-in form: asked of /api/session, which answers 200 either way, so
// that a person not signed in yet sees no failed request in the console.
async function start() {
  $("enrol").hidden = true;
  try {
    const s = await api("/api/session");
    if (!s.approver) { signedOut(); return; }
  } catch (e) {
    say(e.message);
    return;
  }
  refresh();
}

// showEnrolment names the approver the link enrols before anything is
// pressed, or says at once that the link no longer works (used, expired
// or withdrawn) and offers the sign-in form instead of the button.
async function showEnrolment(token) {
  const c = await api("/api/enrol/check", { token });
  if (!c.valid) {
    history.replaceState(null, "", "/");
    say("This enrolment link no longer works: it was used, has expired or was withdrawn. Ask whoever sent it for a new one; if you enrolled with it, sign in.");
    signedOut();
    return;
  }
  $("enrol-who").textContent = c.approver;
  $("enrol").hidden = false;
  $("enrol-button").onclick = () => enrol(token).catch((e) => say("Enrolment failed: " + e.message));
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-button").onclick = () => login($("login-id").value).catch((e) => say("Sign-in failed: " + e.message));
  $("logout-button").onclick = () => logout().catch((e) => say("Sign-out failed: " + e.message));
  // The enrolment token is in the fragment: browsers never send it in a
  // request line or a Referer, so it stays out of every log.
  const token = location.pathname === "/enrol" ? location.hash.slice(1) : "";
  if (token) {
    showEnrolment(token).catch((e) => say("Enrolment failed: " + e.message));
    return;
  }
  start();
});
