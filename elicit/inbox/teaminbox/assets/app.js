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

async function answer(card, action, approve, reason) {
  try {
    const begin = await api("/api/answer/begin", { request: card.request, action, approve, reason });
    const cred = await navigator.credentials.get({ publicKey: requestOptions(begin.publicKey) });
    const done = await api("/api/answer/finish", { ceremony: begin.ceremony, credential: assertionJSON(cred) });
    say("Sent: " + done.sent);
  } catch (e) {
    say("Not sent: " + e.message);
  }
  refresh();
}

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// deadline shows an RFC 3339 deadline as a person reads it: the local
// time and how long is left ("Answer by 14:05 (4 min left)"), with the
// exact instant in a <time> element's datetime and title.
function deadline(at) {
  const d = new Date(at);
  if (isNaN(d)) return el("p", "Deadline " + at, { class: "deadline" });
  const p = el("p", "Answer by ", { class: "deadline" });
  const t = el("time", d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }), { datetime: at, title: d.toString() });
  const mins = Math.round((d - Date.now()) / 60000);
  p.append(t, mins > 0 ? " (" + mins + " min left)" : mins === 0 ? " (less than a minute left)" : " (passed)");
  return p;
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

function render(cards) {
  const box = $("cards");
  box.replaceChildren();
  if (cards.length === 0) box.append(el("p", "Nothing waits for you."));
  for (const c of cards) {
    const a = el("article", undefined, { "data-proposal": c.proposal, "data-request": c.request, "data-state": c.state });
    a.append(el("h2", c.summary));
    if (c.message) a.append(el("p", c.message));
    a.append(el("pre", c.arguments));
    a.append(el("p", "Call digest " + c.digest, { class: "digest" }));
    if (c.deadline) a.append(deadline(c.deadline));
    if (c.progress) a.append(el("p", c.progress, { class: "progress" }));
    else if (c.quorum > 1) a.append(el("p", "Needs " + c.quorum + " approvals.", { class: "progress" }));
    if (c.status) a.append(el("p", c.status, { class: "card-status" }));
    if (c.outcome) a.append(el("p", c.outcome, { class: "outcome" }));
    if (c.state === "open") {
      const row = el("div", undefined, { class: "actions" });
      const approve = el("button", "Approve", { type: "button" });
      approve.disabled = !c.digest_ok;
      approve.onclick = () => answer(c, "accept", true, "");
      const decline = el("button", "Decline", { type: "button" });
      decline.onclick = () => {
        const label = el("label", "Reason", { for: "reason-" + c.request });
        const field = el("textarea", undefined, { id: "reason-" + c.request, maxlength: "2000" });
        const send = el("button", "Send", { type: "button" });
        send.onclick = () => field.value ? answer(c, "accept", false, field.value) : answer(c, "decline", false, "");
        a.append(label, field, send);
        field.focus();
      };
      row.append(approve, decline);
      a.append(row);
    }
    box.append(a);
    if (linked && c.proposal === linked) {
      a.classList.add("linked");
      if (!scrolled) a.scrollIntoView({ block: "start" });
      scrolled = true;
    }
  }
}

let timer = null;
async function refresh() {
  try {
    const data = await api("/api/cards");
    $("who").textContent = data.approver;
    $("login").hidden = true;
    $("logout-button").hidden = false;
    // Keep an open Decline form: re-render only when nothing is typed.
    if (!document.activeElement || document.activeElement.tagName !== "TEXTAREA") render(data.cards);
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
